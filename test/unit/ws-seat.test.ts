// A session's seat counts only its own deliveries: an ACK frees a slot of the connection
// that sent the delivery, whichever connection carried it (ws/seat.ts).
import { strict as assert } from "node:assert";
import { Seat } from "../../src/ws/seat.js";

const LEASE = 60_000;

/** A bound seat of `capacity` whose last claim sent `ids`, each leased for LEASE. */
function holding(capacity: number, ids: readonly string[]): Seat {
  const seat = new Seat();
  seat.bind(capacity, true);
  seat.claimed(false, ids.length);
  for (const id of ids) seat.sent(id, Date.now() + LEASE);
  return seat;
}

describe("ws seat", () => {
  it("frees a slot for an ACK of a delivery it sent, not for another connection's", () => {
    const seat = holding(1, ["mine"]);
    // The client ACKs another connection's delivery on this one: this session is still full.
    assert.equal(seat.acked("theirs", false), false);
    assert.equal(seat.wantsClaim(), false);
    // Its own: the slot is free and a claim is worth asking for.
    assert.equal(seat.acked("mine", false), true);
    assert.equal(seat.wantsClaim(), true);
  });

  it("frees a slot when another connection ACKs a delivery it sent, while its lease runs", () => {
    const seat = holding(1, ["mine"]);
    assert.equal(seat.ackedElsewhere("theirs"), false);
    assert.equal(seat.wantsClaim(), false);
    assert.equal(seat.ackedElsewhere("mine"), true);
    assert.equal(seat.wantsClaim(), true);
  });

  it("frees a slot for a deduplicated ACK of a delivery it still counts, and nothing for one it does not", () => {
    const seat = holding(1, ["mine"]);
    // Taken first on another node's connection (no signal came here), replayed on this one.
    assert.equal(seat.acked("mine", true), true);
    assert.equal(seat.wantsClaim(), true);
    assert.equal(seat.acked("mine", true), false, "a second replay frees nothing more");
  });

  it("frees, after a read of its leases, a delivery it sent that is no longer LEASED to it", () => {
    const seat = new Seat();
    seat.bind(2, true);
    assert.equal(seat.leaseCheck(), undefined, "nothing held: nothing to read");
    seat.claimed(false, 2);
    seat.sent("a", Date.now() + LEASE);
    seat.sent("b", Date.now() + LEASE);
    assert.equal(seat.wantsClaim(), false);
    const mark = seat.leaseCheck()!;
    assert.equal(seat.leasedNow(new Set(["a", "b"]), mark), false, "both still leased");
    assert.equal(seat.leasedNow(new Set(["b"]), mark), true, "a was ACKed elsewhere");
    assert.equal(seat.wantsClaim(), true);
    assert.equal(seat.room(), 1);
  });

  it("keeps the slot of a delivery whose ACK on this connection is unanswered, or sent after the read began", () => {
    const seat = holding(2, ["a"]);
    const mark = seat.leaseCheck()!;
    seat.acking("a"); // its reply must reach the client before a delivery takes its slot
    seat.claimed(false, 2);
    seat.sent("b", Date.now() + LEASE); // leased after the read began
    assert.equal(seat.leasedNow(new Set(), mark), false);
    assert.equal(seat.room(), 0);
    assert.equal(seat.acked("a", false), true, "the reply frees it");
    assert.equal(seat.room(), 1);
  });
});

import { strict as assert } from "node:assert";
import fc from "fast-check";
import { toWireEvent, toWireEventJson } from "../../src/domain/result-log.js";
import { deliverFrameText } from "../../src/ws/frames.js";
import type { EventRow } from "../../src/db/queries/result-log.js";
import type { DeliveryRow } from "../../src/db/queries/deliveries.js";
import { toWireDelivery } from "../../src/domain/deliveries.js";
import { leasedDelivery } from "../../src/domain/delivery-engine.js";
import { formatTimestamp } from "../../src/wire/time.js";

const hex32 = fc.stringMatching(/^[0-9a-f]{32}$/);

/** A stored event row: details and snapshot as appendEventStatement stores them (JSON.stringify). */
const rows = fc.record({
  id: hex32,
  namespace_id: hex32,
  queue_id: hex32,
  sequence: fc.bigInt({ min: 1n, max: 2n ** 64n - 1n }).map(String),
  type: fc.constantFrom("task.cancelled", "task.failed", "task.needs_review", "task.succeeded"),
  aggregate_id: hex32,
  aggregate_revision: fc.bigInt({ min: 1n, max: 2n ** 64n - 1n }).map(String),
  occurred_at: fc.date({
    min: new Date("2000-01-01T00:00:00.000Z"),
    max: new Date("2999-12-31T23:59:59.999Z"),
    noInvalidDate: true,
  }),
  details: fc.dictionary(fc.string({ unit: "binary" }), fc.jsonValue()).map((d) => JSON.stringify(d)),
  snapshot: fc
    .record({
      result: fc.option(fc.string({ unit: "binary" })),
      n: fc.double({ noNaN: true, noDefaultInfinity: true }),
      k: fc.jsonValue(),
    })
    .map((s) => JSON.stringify(s)),
});

describe("a delivered event's JSON, spliced from the stored text", () => {
  it("is exactly the text of the parsed event written again, for any stored details and snapshot", () => {
    fc.assert(
      fc.property(rows, (row: EventRow) => {
        assert.equal(toWireEventJson(row), JSON.stringify(toWireEvent(row)));
      }),
      { numRuns: 500 },
    );
  });

  it("keeps the checks of the parsed form: no unnumbered event, no event that is not a result", () => {
    const row = fc.sample(rows, 1)[0]! as EventRow;
    assert.throws(() => toWireEventJson({ ...row, sequence: null }), /unnumbered/);
    assert.throws(() => toWireEventJson({ ...row, type: "task.requeued" }), /not a result/);
  });

  it("makes the same event.deliver frame as JSON.stringify of its object, but for the message id", () => {
    const row = fc.sample(rows, 1)[0]! as EventRow;
    const delivery = { id: "3".repeat(32), state: "LEASED", lease_epoch: "1", attempts: 1 };
    const frame = JSON.parse(deliverFrameText("4".repeat(32), delivery, toWireEventJson(row), "A".repeat(43)));
    assert.match(frame.message_id, /^[0-9a-f]{32}$/);
    assert.equal(
      JSON.stringify(frame),
      JSON.stringify({
        protocol_version: "1",
        type: "event.deliver",
        message_id: frame.message_id,
        session_id: "4".repeat(32),
        body: { delivery, event: toWireEvent(row), lease_secret: "A".repeat(43) },
      }),
    );
  });
});

describe("a leased delivery's wire form, built without reading the row back", () => {
  const uint64 = fc.bigInt({ min: 0n, max: 2n ** 64n - 2n }).map(String);
  const date = fc.date({
    min: new Date("2000-01-01T00:00:00.000Z"),
    max: new Date("2999-12-31T23:59:59.999Z"),
    noInvalidDate: true,
  });
  const pending = fc.record({
    id: hex32,
    subscription_id: hex32,
    event_id: hex32,
    sequence: uint64,
    revision: uint64,
    state: fc.constant("PENDING" as const),
    created_at: date,
    available_at: date,
    lease_epoch: uint64,
    lease_until: fc.constant(null),
    attempts: fc.nat({ max: 999_999 }),
    attempt_budget: fc.integer({ min: 1, max: 1_000_000 }),
    acknowledged_at: fc.constant(null),
  });

  it("is toWireDelivery of the row as the lease UPDATE leaves it: epoch, attempts and revision + 1, LEASED, lease_until", () => {
    fc.assert(
      fc.property(pending, date, (row: DeliveryRow, until: Date) => {
        const leased: DeliveryRow = {
          ...row,
          state: "LEASED",
          lease_until: until,
          attempts: row.attempts + 1,
          lease_epoch: (BigInt(row.lease_epoch) + 1n).toString(),
          revision: (BigInt(row.revision) + 1n).toString(),
        };
        assert.equal(
          JSON.stringify(leasedDelivery(row.subscription_id, row, formatTimestamp(until))),
          JSON.stringify(toWireDelivery(leased)),
        );
      }),
      { numRuns: 500 },
    );
  });
});

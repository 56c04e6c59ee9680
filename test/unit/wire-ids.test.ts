import { strict as assert } from "node:assert";
import { newHexId, newRowId, rowIdPrefix } from "../../src/wire/ids.js";
import { randomHex } from "../../src/wire/random-hex.js";

describe("wire ids", () => {
  it("are 32 lowercase hex characters of random bytes, all distinct", () => {
    const ids = Array.from({ length: 2000 }, () => newHexId());
    for (const id of ids) assert.match(id, /^[0-9a-f]{32}$/);
    assert.equal(new Set(ids).size, ids.length);
    // Every byte value shows up: random bytes, not a counter or zeros.
    assert.equal(new Set(ids.flatMap((id) => id.match(/../g)!)).size, 256);
  });

  it("row ids are 32 lowercase hex, the creating millisecond first, then 80 random bits", () => {
    const at = Date.UTC(2026, 10, 30, 12, 0, 0, 123);
    const ids = Array.from({ length: 2000 }, () => newRowId(at));
    for (const id of ids) {
      assert.match(id, /^[0-9a-f]{32}$/);
      assert.equal(id.slice(0, 12), at.toString(16).padStart(12, "0"));
    }
    assert.equal(new Set(ids).size, ids.length);
    assert.equal(new Set(ids.flatMap((id) => id.slice(12).match(/../g)!)).size, 256);
  });

  it("row ids made in a later millisecond sort after earlier ones (primary keys grow at the end)", () => {
    const earlier = Array.from({ length: 100 }, (_, i) => newRowId(1_700_000_000_000 + i));
    const sorted = [...earlier].sort();
    assert.deepEqual(sorted, earlier);
    const t = Date.now();
    assert.ok(newRowId(t + 1) > newRowId(t), "a later millisecond sorts after, whatever the random part");
    // The prefix keeps its 12 characters from the epoch on, so string order is time order.
    assert.equal(rowIdPrefix(0), "000000000000");
    assert.ok(rowIdPrefix(0xfff) < rowIdPrefix(0x1000));
  });

  it("random hex comes from a pool refilled as it runs out: the asked length, never repeated across refills", () => {
    // 3,000 × 10 bytes is 7 refills of the 4 KiB pool (an id never straddles one: the rest is dropped).
    const ids = Array.from({ length: 3000 }, () => randomHex(10));
    for (const id of ids) assert.match(id, /^[0-9a-f]{20}$/);
    assert.equal(new Set(ids).size, ids.length);
    assert.match(randomHex(4096), /^[0-9a-f]{8192}$/);
    assert.match(randomHex(1), /^[0-9a-f]{2}$/);
    for (const bad of [0, -1, 4097, 1.5, Number.NaN]) assert.throws(() => randomHex(bad), RangeError);
  });
});

import { strict as assert } from "node:assert";
import { newHexId } from "../../src/wire/ids.js";

describe("wire ids", () => {
  it("are 32 lowercase hex characters of random bytes, all distinct", () => {
    const ids = Array.from({ length: 2000 }, () => newHexId());
    for (const id of ids) assert.match(id, /^[0-9a-f]{32}$/);
    assert.equal(new Set(ids).size, ids.length);
    // Every byte value shows up: random bytes, not a counter or zeros.
    assert.equal(new Set(ids.flatMap((id) => id.match(/../g)!)).size, 256);
  });
});

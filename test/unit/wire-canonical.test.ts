// canonicalJson: equal for the same content however it is spaced or ordered; different
// for any difference in content, including numbers a double cannot tell apart.
import { strict as assert } from "node:assert";
import fc from "fast-check";
import { canonicalJson } from "../../src/wire/canonical.js";

function shuffleKeys(v: unknown, rnd: () => number): unknown {
  if (Array.isArray(v)) return v.map((x) => shuffleKeys(x, rnd));
  if (v && typeof v === "object") {
    const entries = Object.entries(v).sort(() => rnd() - 0.5);
    const o: Record<string, unknown> = {};
    for (const [k, x] of entries) Object.defineProperty(o, k, { value: shuffleKeys(x, rnd), enumerable: true, writable: true, configurable: true });
    return o;
  }
  return v;
}

describe("canonicalJson", () => {
  it("ignores key order and whitespace", () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.integer(), (v, seed) => {
        let s = seed;
        const rnd = () => ((s = (s * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
        const a = JSON.stringify(v);
        const b = JSON.stringify(shuffleKeys(v, rnd), null, 2);
        return canonicalJson(a) === canonicalJson(b);
      }),
    );
  });

  it("keeps the meaning: the canonical text parses to the same value", () => {
    fc.assert(fc.property(fc.jsonValue(), (v) => assert.deepEqual(JSON.parse(canonicalJson(JSON.stringify(v))), JSON.parse(JSON.stringify(v)))));
  });

  it("keeps numbers exactly as written", () => {
    assert.notEqual(canonicalJson('{"n":12345678901234567890}'), canonicalJson('{"n":12345678901234567891}'));
    assert.equal(canonicalJson('{ "b" : [1.50, "x\\u0041"], "a":true }'), '{"a":true,"b":[1.50,"xA"]}');
    assert.notEqual(canonicalJson("1.0"), canonicalJson("1"));
  });

  it("tells different content apart", () => {
    assert.notEqual(canonicalJson('{"a":1}'), canonicalJson('{"a":2}'));
    assert.notEqual(canonicalJson('{"a":"1"}'), canonicalJson('{"a":1}'));
    assert.notEqual(canonicalJson('{"a":null}'), canonicalJson("{}"));
  });
});

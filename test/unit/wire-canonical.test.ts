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
    for (const [k, x] of entries)
      Object.defineProperty(o, k, { value: shuffleKeys(x, rnd), enumerable: true, writable: true, configurable: true });
    return o;
  }
  return v;
}

describe("canonicalJson", () => {
  it("ignores key order and whitespace", () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.integer(), (v, seed) => {
        let s = seed;
        const rnd = () => (s = (s * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
        const a = JSON.stringify(v);
        const b = JSON.stringify(shuffleKeys(v, rnd), null, 2);
        return canonicalJson(a) === canonicalJson(b);
      }),
    );
  });

  it("keeps the meaning: the canonical text parses to the same value", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (v) =>
        assert.deepEqual(JSON.parse(canonicalJson(JSON.stringify(v))), JSON.parse(JSON.stringify(v))),
      ),
    );
  });

  it("keeps numbers exactly as written", () => {
    assert.notEqual(canonicalJson('{"n":12345678901234567890}'), canonicalJson('{"n":12345678901234567891}'));
    assert.equal(canonicalJson('{ "b" : [1.50, "x\\u0041"], "a":true }'), '{"a":true,"b":[1.50,"xA"]}');
    assert.notEqual(canonicalJson("1.0"), canonicalJson("1"));
  });

  it("orders keys by UTF-16 code unit, not by code point", () => {
    // The canonical text is stored (idempotency content, an attempt's end body) and compared
    // by every node and every later build: one that ordered keys otherwise would answer a
    // replay of the same body 409. U+1F600 is D83D DE00 in UTF-16, so it sorts before U+FFFF
    // by code unit and after it by code point.
    assert.equal(canonicalJson('{"\\uffff":1,"\\ud83d\\ude00":2,"a":3}'), '{"a":3,"\u{1f600}":2,"\uffff":1}');
  });

  it("tells different content apart", () => {
    assert.notEqual(canonicalJson('{"a":1}'), canonicalJson('{"a":2}'));
    assert.notEqual(canonicalJson('{"a":"1"}'), canonicalJson('{"a":1}'));
    assert.notEqual(canonicalJson('{"a":null}'), canonicalJson("{}"));
  });
});

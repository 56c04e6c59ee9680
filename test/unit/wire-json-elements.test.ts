// arrayElementTexts: the exact text of each element of a strict JSON array, whatever its
// nesting, strings (brackets, commas and escaped quotes inside them) and spacing.
import { strict as assert } from "node:assert";
import fc from "fast-check";
import { arrayElementTexts } from "../../src/wire/json-elements.js";
import { parseStrictJson } from "../../src/wire/json.js";

describe("arrayElementTexts", () => {
  it("gives each element's text as written", () => {
    assert.deepEqual(arrayElementTexts("[]"), []);
    assert.deepEqual(arrayElementTexts(" [ ] "), []);
    assert.deepEqual(arrayElementTexts('[1, "a,]\\"}" ,{"x":[1,{"y":"]"}]}, 1.10 ,null]'), [
      "1",
      '"a,]\\"}"',
      '{"x":[1,{"y":"]"}]}',
      "1.10",
      "null",
    ]);
    assert.deepEqual(arrayElementTexts('[\n  {"n": 12345678901234567890}\n]'), ['{"n": 12345678901234567890}']);
  });

  it("is undefined for a value that is not an array", () => {
    for (const text of ["{}", '"[1]"', "1", "null"]) assert.equal(arrayElementTexts(text), undefined, text);
  });

  it("splits any array into texts that parse to its elements", () => {
    fc.assert(
      fc.property(fc.array(fc.jsonValue()), fc.constantFrom("", " ", "\n\t"), (items, ws) => {
        const text = `[${ws}${items.map((v) => JSON.stringify(v, null, ws ? 1 : undefined)).join(`${ws},${ws}`)}${ws}]`;
        parseStrictJson(text);
        const texts = arrayElementTexts(text)!;
        assert.equal(texts.length, items.length);
        texts.forEach((t, i) => assert.deepEqual(JSON.parse(t), JSON.parse(JSON.stringify(items[i]))));
      }),
    );
  });
});

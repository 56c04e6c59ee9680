import { strict as assert } from "node:assert";
import fc from "fast-check";
import { parseStrictJson, HARD_MAX_DEPTH } from "../../src/wire/json.js";
import { WireError } from "../../src/wire/wire-error.js";

function rejects(text: string, message: RegExp, opts?: { maxDepth?: number }): void {
  assert.throws(
    () => parseStrictJson(text, opts),
    (err: unknown) => {
      assert.ok(err instanceof WireError, `expected WireError for ${JSON.stringify(text)}`);
      assert.match(err.message, message);
      assert.match(err.message, /at offset \d+$/);
      return true;
    },
    `should reject ${JSON.stringify(text.slice(0, 80))}`,
  );
}

/** True if some string (key or value) in v holds a lone surrogate. */
function hasLoneSurrogate(v: unknown): boolean {
  if (typeof v === "string") return /\p{Cs}/u.test(v);
  if (Array.isArray(v)) return v.some(hasLoneSurrogate);
  if (v !== null && typeof v === "object") {
    return Object.entries(v).some(([k, x]) => hasLoneSurrogate(k) || hasLoneSurrogate(x));
  }
  return false;
}

/** Every UTF-16 unit as \uXXXX: same key after unescaping, different source text. */
function escapeAll(s: string): string {
  return '"' + [...s].map((_, i) => "\\u" + s.charCodeAt(i).toString(16).padStart(4, "0")).join("") + '"';
}

describe("wire/json parseStrictJson", () => {
  describe("agrees with JSON.parse on valid JSON", () => {
    for (const stringUnit of ["grapheme-ascii", "grapheme"] as const) {
      it(`any fc.jsonValue (${stringUnit}), compact and indented`, () => {
        fc.assert(
          fc.property(fc.jsonValue({ stringUnit }), fc.constantFrom(0, 1, "\t", " \r\n"), (v, indent) => {
            const text = JSON.stringify(v, null, indent);
            assert.deepStrictEqual(parseStrictJson(text).value, JSON.parse(text));
          }),
          { numRuns: 500 },
        );
      });
    }

    it("binary strings: accepted exactly when free of lone surrogates", () => {
      fc.assert(
        fc.property(fc.jsonValue({ stringUnit: "binary" }), (v) => {
          const text = JSON.stringify(v);
          if (hasLoneSurrogate(v)) rejects(text, /lone surrogate/);
          else assert.deepStrictEqual(parseStrictJson(text).value, JSON.parse(text));
        }),
        { numRuns: 500 },
      );
    });

    it("on grammar-ish garbage: never more lenient than JSON.parse, same value when accepted", () => {
      const unit = fc.constantFrom(...'{}[],:"\\ \n0123456789-+.eEtruefalsn'.split(""), "u0061", "ud800");
      fc.assert(
        fc.property(fc.string({ unit, maxLength: 30 }), (text) => {
          let expected: unknown;
          try {
            expected = JSON.parse(text);
          } catch {
            assert.throws(() => parseStrictJson(text), WireError);
            return;
          }
          try {
            assert.deepStrictEqual(parseStrictJson(text).value, expected);
          } catch (err) {
            // Only the stricter rules may refuse what JSON.parse takes.
            assert.ok(err instanceof WireError);
            assert.match(err.message, /duplicate key|lone surrogate|out of range/);
          }
        }),
        { numRuns: 3000 },
      );
    });

    it("keeps number values as JSON.parse does, including -0 and the smallest subnormal", () => {
      // Underflow to 0 (1e-400) is refused: "fractions that read as whole numbers", below.
      for (const t of [
        "-0",
        "0",
        "1E2",
        "5e-324",
        "4e-324",
        "-1.5e+3",
        "12345678901234567890",
        "0.1",
        "1.7976931348623157e308",
      ]) {
        assert.ok(Object.is(parseStrictJson(t).value, JSON.parse(t)), t);
      }
    });
  });

  describe("duplicate keys", () => {
    const wrapper = fc.constantFrom("[_]", "[0,_]", '{"w":_}', '{"a":1,"w":_,"z":[]}');
    const scenario = fc.record({
      key: fc.string({ maxLength: 8 }),
      v1: fc.jsonValue({ maxDepth: 2 }),
      v2: fc.jsonValue({ maxDepth: 2 }),
      others: fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 1 }), { maxKeys: 4 }),
      escapeSecond: fc.boolean(),
      at: fc.nat(),
      wrappers: fc.array(wrapper, { maxLength: 40 }),
    });

    it("are rejected at any depth, also when spelled with escapes", () => {
      fc.assert(
        fc.property(scenario, (s) => {
          const members = Object.entries(s.others)
            .filter(([k]) => k !== s.key)
            .map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`);
          members.splice(s.at % (members.length + 1), 0, `${JSON.stringify(s.key)}:${JSON.stringify(s.v1)}`);
          const second = s.escapeSecond ? escapeAll(s.key) : JSON.stringify(s.key);
          members.splice((s.at * 7) % (members.length + 1), 0, `${second}:${JSON.stringify(s.v2)}`);
          const text = s.wrappers.reduce((inner, w) => w.replace("_", () => inner), `{${members.join(",")}}`);
          rejects(text, /^duplicate key /);
        }),
        { numRuns: 1000 },
      );
    });

    it("examples: plain, escaped, nested, __proto__", () => {
      assert.throws(() => parseStrictJson('{"a":1,"a":2}'), { message: 'duplicate key "a" at offset 7' });
      rejects('{"a":1,"\\u0061":2}', /^duplicate key "a"/);
      rejects('[{"x":{"b":1,"c":2,"b":1}}]', /^duplicate key "b"/);
      rejects('{"__proto__":1,"__proto__":2}', /^duplicate key "__proto__"/);
      rejects('{"":1,"":1}', /^duplicate key ""/);
      assert.deepStrictEqual(parseStrictJson('{"a":{"a":{"a":1}}}').value, { a: { a: { a: 1 } } });
    });

    it("echoes at most 32 characters of a long key", () => {
      const key = "k".repeat(1000);
      assert.throws(
        () => parseStrictJson(`{"${key}":1,"${key}":2}`),
        (err: unknown) => {
          assert.ok(err instanceof WireError);
          assert.ok(!err.message.includes("k".repeat(33)), err.message);
          assert.ok(err.message.length < 80, err.message);
          return true;
        },
      );
    });
  });

  describe("raw source text of top-level values", () => {
    it("re-parses to the same value, for any object and indentation", () => {
      const obj = fc.dictionary(fc.string(), fc.jsonValue(), { maxKeys: 6 });
      fc.assert(
        fc.property(obj, fc.constantFrom(0, 2, "\t"), (o, indent) => {
          const { value, raw } = parseStrictJson(JSON.stringify(o, null, indent));
          const v = value as Record<string, unknown>;
          assert.deepStrictEqual([...raw.keys()], Object.keys(v));
          for (const [k, text] of raw) assert.deepStrictEqual(parseStrictJson(text).value, v[k]);
        }),
      );
    });

    it("is the exact text, precision and spacing included", () => {
      const { value, raw } = parseStrictJson(' {"n" : 12345678901234567890 , "r":{"a" : [1, 2.50]},"s":"\\u0041"} ');
      assert.equal(raw.get("n"), "12345678901234567890");
      assert.equal(raw.get("r"), '{"a" : [1, 2.50]}');
      assert.equal(raw.get("s"), '"\\u0041"');
      assert.equal(raw.size, 3, "nested keys are not in raw");
      // eslint-disable-next-line no-loss-of-precision -- the parsed value is the same double
      assert.deepStrictEqual(value, { n: 12345678901234567890, r: { a: [1, 2.5] }, s: "A" });
    });

    it("is empty for non-object documents", () => {
      for (const t of ['[{"a":1}]', '"x"', "1", "null", "{}"]) assert.equal(parseStrictJson(t).raw.size, 0, t);
    });
  });

  describe("__proto__ and other special keys", () => {
    it("become own data properties and never change the prototype", () => {
      const text = '{"__proto__":{"polluted":true},"constructor":1,"toString":2,"a":{"__proto__":[]}}';
      const v = parseStrictJson(text).value as Record<string, unknown>;
      assert.equal(Object.getPrototypeOf(v), Object.prototype);
      assert.ok(Object.hasOwn(v, "__proto__"));
      assert.equal((v as { polluted?: unknown }).polluted, undefined);
      assert.deepStrictEqual(v, JSON.parse(text));
      assert.equal(({} as { polluted?: unknown }).polluted, undefined);
    });
  });

  describe("rejects, one literal input per rule", () => {
    const cases: Array<[string, string, RegExp]> = [
      ["empty input", "", /end of input/],
      ["whitespace only", " \n", /end of input/],
      ["block comment", '{"a":1 /* c */}', /unexpected character "\/"/],
      ["line comment", "// c\n1", /unexpected character/],
      ["trailing comma in array", "[1,]", /unexpected character "]"/],
      ["trailing comma in object", '{"a":1,}', /expected string key/],
      ["single-quoted key", "{'a':1}", /expected string key/],
      ["single-quoted string", "'x'", /unexpected character/],
      ["NaN", "NaN", /unexpected character "N"/],
      ["Infinity", "[Infinity]", /unexpected character "I"/],
      ["-Infinity", "-Infinity", /invalid number/],
      ["leading zero", "01", /leading zero/],
      ["negative leading zero", "[-007]", /leading zero/],
      ["plus sign", "+1", /unexpected character "\+"/],
      ["bare fraction", ".5", /unexpected character/],
      ["dangling dot", "1.", /invalid number/],
      ["dangling exponent", "1e+", /invalid number/],
      ["hex", "0x10", /unexpected character "x"/],
      ["non-finite number", "1e400", /number out of range/],
      ["negative non-finite number", '{"a":-1e400}', /number out of range/],
      // Fractions a double reads as whole numbers: an integer field would take 0 or 100.
      ["underflow to zero", '{"a":1e-400}', /not whole but reads as a whole number at offset 5/],
      ["negative underflow to zero", "[-4.9e-325]", /not whole but reads as a whole number/],
      ["fraction beyond a double's precision", "100.000000000000001", /not whole but reads as a whole number/],
      ["fraction lost to rounding up", "999.99999999999999999", /not whole but reads as a whole number/],
      ["fraction lost in a large number", "9007199254740993.5", /not whole but reads as a whole number/],
      ["fraction by exponent", "1234567890123456.75e1", /not whole but reads as a whole number/],
      ["BOM", "\ufeff{}", /byte order mark at offset 0/],
      ["NBSP as whitespace", "\u00a0{}", /unexpected character/],
      ["U+2028 as whitespace", "{}\u2028", /unexpected character/],
      ["vertical tab as whitespace", "\v1", /unexpected character "\\u000b"/],
      ["form feed as whitespace", "[1,\f2]", /unexpected character "\\f"/],
      ["lone high surrogate escape", '"\\ud800"', /lone surrogate escape/],
      ["high surrogate then non-low escape", '"\\ud800\\u0041"', /lone surrogate escape/],
      ["high surrogate then other escape", '"\\ud83d\\n"', /lone surrogate escape/],
      ["lone low surrogate escape", '["\\udc00"]', /lone surrogate escape/],
      ["raw lone surrogate", '"a\ud800b"', /lone surrogate at offset 2/],
      ["raw lone surrogate in key", '{"\udfff":1}', /lone surrogate/],
      ["raw newline in string", '"a\nb"', /unescaped control character/],
      ["raw NUL in string", '"\u0000"', /unescaped control character/],
      // RFC 8259 §7: all of U+0000-U+001F must be escaped, the last of them too.
      ["raw U+001F in string", '"a\u001fb"', /unescaped control character in string at offset 2/],
      ["raw tab in key", '{"\t":1}', /unescaped control character/],
      ["unknown escape", '"\\x41"', /invalid escape/],
      ["escaped single quote", '"\\\'"', /invalid escape/],
      ["short \\u escape", '"\\u12"', /invalid \\u escape/],
      ["non-hex \\u escape", '"\\u12G4"', /invalid \\u escape/],
      ["unterminated string", '"abc', /unterminated string at offset 0/],
      ["unterminated array", "[1,2", /end of input/],
      ["unterminated object", '{"a":1', /end of input/],
      ["missing colon", '{"a" 1}', /expected ':'/],
      ["non-string key", "{1:2}", /expected string key/],
      ["missing comma", "[1 2]", /expected ',' or ']'/],
      ["truncated literal", "tru", /unexpected character/],
      ["literal with trailing letters", "truex", /unexpected character "x"/],
      ["capitalised literal", "Null", /unexpected character "N"/],
      ["two documents", "1 2", /unexpected character "2"/],
      ["extra closer", "{}}", /unexpected character "}"/],
    ];
    for (const [rule, text, message] of cases) it(rule, () => rejects(text, message));

    it("accepts the neighbours of those rules", () => {
      // \u escapes in upper case are JSON too (RFC 8259 §7: HEXDIG is case-insensitive);
      // JSON.stringify writes lower case only, so the property tests never send them.
      for (const t of [
        '"\\u00C9\\uD83D\\uDE00\\u00e9\\u0aBc"',
        '"\\ud83d\\ude00"',
        '"\ud83d\ude00"',
        '"\u007f"',
        '" \\/ \\b\\f\\n\\r\\t"',
        "-0.0e-0",
        " \t\r\n[ ] ",
        "1.0",
        "1e3",
        "1.5e1",
        "2.50e2",
        "100.0000",
        "1e-0",
        "0e-400",
        "1e22",
        "5e-324",
        "0.1",
        "1e308",
        "99.999999999999",
      ]) {
        assert.deepStrictEqual(parseStrictJson(t).value, JSON.parse(t), t);
      }
    });
  });

  describe("nesting depth", () => {
    const nest = (n: number): string => "[".repeat(n) + "]".repeat(n);

    it("allows 256 levels by default and rejects 257", () => {
      assert.equal(parseStrictJson(nest(256)).raw.size, 0);
      rejects(nest(257), /nesting deeper than 256 at offset 256/);
      rejects('{"a":'.repeat(257) + "1" + "}".repeat(257), /nesting deeper than 256/);
    });

    it("honours maxDepth", () => {
      rejects('{"a":{}}', /nesting deeper than 1/, { maxDepth: 1 });
      assert.deepStrictEqual(parseStrictJson('{"a":1}', { maxDepth: 1 }).value, { a: 1 });
      assert.equal(parseStrictJson('"s"', { maxDepth: 0 }).value, "s");
      rejects("[]", /nesting deeper than 0/, { maxDepth: 0 });
      assert.equal(parseStrictJson(nest(HARD_MAX_DEPTH), { maxDepth: HARD_MAX_DEPTH }).raw.size, 0);
    });

    it("fails cleanly, without a stack overflow, on very deep input", () => {
      rejects(nest(1_000_000), /nesting deeper than 256/);
      rejects('{"a":'.repeat(1_000_000), /nesting deeper than 256/);
    });

    it("refuses a maxDepth beyond the hard cap (a programming error)", () => {
      for (const maxDepth of [HARD_MAX_DEPTH + 1, -1, 1.5, Number.NaN]) {
        assert.throws(() => parseStrictJson("1", { maxDepth }), RangeError);
      }
    });
  });
});

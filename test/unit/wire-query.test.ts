import { strict as assert } from "node:assert";
import fc from "fast-check";
import { parseQuery } from "../../src/wire/query.js";
import { WireError } from "../../src/wire/wire-error.js";

const ALLOWED = ["queue_id", "limit", "cursor"] as const;

function rejects(query: string, message: RegExp, field?: string, allowed: readonly string[] = ALLOWED): void {
  assert.throws(
    () => parseQuery(query, allowed),
    (err: unknown) => {
      assert.ok(err instanceof WireError, `expected WireError for ${JSON.stringify(query)}`);
      assert.match(err.message, message);
      assert.equal(err.field, field);
      return true;
    },
    `should reject ${JSON.stringify(query)}`,
  );
}

/** Allowed names with arbitrary values, in random order, as [name, value] pairs. */
const params = fc
  .shuffledSubarray([...ALLOWED])
  .chain((names) => fc.tuple(...names.map((n) => fc.tuple(fc.constant(n), fc.string({ unit: "binary-ascii" })))))
  .map((pairs): Array<[string, string]> => pairs);

/** Two encoders: percent-encode everything, or URLSearchParams' form encoding ('+'). */
const encode = fc.constantFrom(
  (pairs: Array<[string, string]>) =>
    pairs.map(([n, v]) => `${encodeURIComponent(n)}=${encodeURIComponent(v)}`).join("&"),
  (pairs: Array<[string, string]>) => new URLSearchParams(pairs).toString(),
);

describe("wire/query parseQuery", () => {
  it("parses any permutation of allowed parameters, agreeing with URLSearchParams", () => {
    fc.assert(
      fc.property(params, encode, (pairs, enc) => {
        const query = enc(pairs);
        const parsed = parseQuery(query, ALLOWED);
        assert.deepStrictEqual(parsed, Object.fromEntries(pairs));
        assert.deepStrictEqual(parsed, Object.fromEntries(new URLSearchParams(query)));
      }),
      { numRuns: 1000 },
    );
  });

  it("rejects any repeated parameter, wherever the repeat is", () => {
    const scenario = fc.record({
      pairs: params.filter((p) => p.length > 0),
      which: fc.nat(),
      at: fc.nat(),
      value: fc.string({ unit: "binary-ascii" }),
    });
    fc.assert(
      fc.property(scenario, encode, ({ pairs, which, at, value }, enc) => {
        const dup = pairs[which % pairs.length]![0];
        const withDup = [...pairs];
        withDup.splice(at % (pairs.length + 1), 0, [dup, value]);
        rejects(enc(withDup), /^repeated query parameter/, dup);
      }),
      { numRuns: 1000 },
    );
  });

  it("rejects any unknown name, including case variants", () => {
    const name = fc.oneof(
      fc.string({ minLength: 1 }).filter((n) => !(ALLOWED as readonly string[]).includes(n)),
      fc.constantFrom("Queue_id", "LIMIT", "Cursor", "queue-id"),
    );
    fc.assert(
      fc.property(params, name, (pairs, unknown) => {
        const query = [...pairs, [unknown, "1"]]
          .map(([n, v]) => `${encodeURIComponent(n!)}=${encodeURIComponent(v!)}`)
          .join("&");
        rejects(query, /^unknown query parameter/, unknown);
      }),
    );
  });

  describe("literal inputs", () => {
    it("gives {} for an empty query string", () => {
      assert.deepStrictEqual(parseQuery("", ALLOWED), {});
      assert.deepStrictEqual(parseQuery("", []), {});
    });

    it("decodes '+' as space, percent escapes, and encoded names", () => {
      assert.deepStrictEqual(parseQuery("cursor=a+b%2Bc%20d&queue%5Fid=x&limit=", ALLOWED), {
        cursor: "a b+c d",
        queue_id: "x",
        limit: "",
      });
      assert.deepStrictEqual(parseQuery("cursor=a=b", ALLOWED), { cursor: "a=b" });
    });

    it("returns a plain object, with __proto__ as an own property when allowed", () => {
      const q = parseQuery("__proto__=x", ["__proto__"]);
      assert.equal(Object.getPrototypeOf(q), Object.prototype);
      assert.ok(Object.hasOwn(q, "__proto__"));
      assert.deepStrictEqual(Object.keys(q), ["__proto__"]);
    });

    const cases: Array<[string, string, RegExp, string | undefined]> = [
      ["unknown name", "foo=1", /unknown query parameter "foo"/, "foo"],
      ["case variant", "Limit=10", /unknown query parameter "Limit"/, "Limit"],
      ["repeated", "limit=1&limit=2", /repeated query parameter "limit"/, "limit"],
      ["repeated with empty value", "limit=1&limit=", /repeated query parameter "limit"/, "limit"],
      ["repeated via encoded name", "limit=1&l%69mit=2", /repeated query parameter "limit"/, "limit"],
      ["empty segment in the middle", "limit=1&&cursor=2", /empty query parameter at offset 8/, undefined],
      ["trailing &", "limit=1&", /empty query parameter/, undefined],
      ["leading &", "&limit=1", /empty query parameter at offset 0/, undefined],
      ["segment without =", "limit", /"limit" has no '='/, "limit"],
      ["later segment without =", "limit=1&cursor", /"cursor" has no '='/, "cursor"],
      ["leading ? is part of the name", "?limit=1", /unknown query parameter "\?limit"/, "?limit"],
      ["truncated percent escape", "cursor=%", /malformed percent-encoding in query parameter "cursor"/, "cursor"],
      ["non-hex percent escape", "cursor=%zz", /malformed percent-encoding/, "cursor"],
      ["invalid UTF-8", "cursor=%C3%28", /malformed percent-encoding/, "cursor"],
      ["encoded lone surrogate", "cursor=%ED%A0%80", /malformed percent-encoding/, "cursor"],
      ["malformed name", "%zz=1", /malformed percent-encoding in query parameter "%zz"/, undefined],
    ];
    for (const [rule, query, message, field] of cases) it(`rejects ${rule}`, () => rejects(query, message, field));

    it("with nothing allowed, rejects any non-empty query string", () => {
      for (const q of ["a=1", "=", "a", "&"]) {
        assert.throws(() => parseQuery(q, []), WireError, q);
      }
    });

    it("echoes at most 32 characters of a long name", () => {
      assert.throws(
        () => parseQuery("x".repeat(500) + "=1", ALLOWED),
        (err: unknown) => {
          assert.ok(err instanceof WireError);
          assert.ok(!err.message.includes("x".repeat(33)), err.message);
          assert.equal(err.field, "x".repeat(64));
          return true;
        },
      );
    });
  });
});

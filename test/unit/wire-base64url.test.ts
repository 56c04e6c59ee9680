import { strict as assert } from "node:assert";
import fc from "fast-check";
import { decodeBase64urlCanonical, encodeBase64url } from "../../src/wire/base64url.js";
import { WireError } from "../../src/wire/wire-error.js";

/** Oracle: alphabet ok, length ok, and Buffer's lenient decode re-encodes to s. */
function oracleAccepts(s: string, n: number): boolean {
  if (!/^[A-Za-z0-9_-]*$/.test(s) || s.length !== Math.ceil((n * 4) / 3)) return false;
  const buf = Buffer.from(s, "base64url");
  return buf.length === n && buf.toString("base64url") === s;
}

function agreesWithOracle(s: string, n: number): void {
  if (oracleAccepts(s, n)) {
    assert.deepStrictEqual(decodeBase64urlCanonical(s, n), Buffer.from(s, "base64url"), s);
  } else {
    assert.throws(() => decodeBase64urlCanonical(s, n), WireError, `${JSON.stringify(s)} for ${n} bytes`);
  }
}

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const alphabetChar = fc.constantFrom(...ALPHABET);
const anyChar = fc.constantFrom(...ALPHABET, "+", "/", "=", " ", ".", "\n");

/** Canonical encodings of random bytes, then one small corruption (or none). */
const nearCanonical = fc
  .record({
    bytes: fc.uint8Array({ maxLength: 40 }),
    edit: fc.constantFrom("none", "replaceLast", "replaceAny", "pad", "drop", "append"),
    at: fc.nat(),
    c: anyChar,
    claimed: fc.integer({ min: -1, max: 1 }),
  })
  .map(({ bytes, edit, at, c, claimed }) => {
    const s = Buffer.from(bytes).toString("base64url");
    const i = s.length === 0 ? 0 : at % s.length;
    const edited =
      edit === "replaceLast"
        ? s.slice(0, -1) + c
        : edit === "replaceAny"
          ? s.slice(0, i) + c + s.slice(i + 1)
          : edit === "pad"
            ? s + "=".repeat(1 + (at % 2))
            : edit === "drop"
              ? s.slice(0, i) + s.slice(i + 1)
              : edit === "append"
                ? s + c
                : s;
    return { s: edited, n: Math.max(0, bytes.length + claimed) };
  });

describe("wire/base64url", () => {
  it("roundtrips random 32-byte buffers through 43 characters", () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 32, maxLength: 32 }), (bytes) => {
        const buf = Buffer.from(bytes);
        const s = encodeBase64url(buf);
        assert.equal(s.length, 43);
        assert.deepStrictEqual(decodeBase64urlCanonical(s, 32), buf);
      }),
      { numRuns: 1000 },
    );
  });

  it("roundtrips buffers of every small length", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 100 }), (bytes) => {
        const buf = Buffer.from(bytes);
        assert.deepStrictEqual(decodeBase64urlCanonical(encodeBase64url(buf), buf.length), buf);
      }),
    );
  });

  it("agrees with the re-encode oracle on corrupted canonical strings", () => {
    fc.assert(
      fc.property(nearCanonical, ({ s, n }) => agreesWithOracle(s, n)),
      { numRuns: 5000 },
    );
  });

  it("agrees with the re-encode oracle on random strings", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 34 }), fc.array(alphabetChar, { maxLength: 46 }), (n, cs) => {
        agreesWithOracle(cs.join(""), n);
      }),
      { numRuns: 3000 },
    );
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 4 }), fc.string({ unit: anyChar, maxLength: 7 }), (n, s) =>
        agreesWithOracle(s, n),
      ),
      {
        numRuns: 3000,
      },
    );
  });

  it("accepts exactly one last character per 1- and 2-byte tail", () => {
    for (const [prefix, n, ok] of [
      ["A", 1, "AQgw"],
      ["AA", 2, "AEIMQUYcgkosw048"],
    ] as const) {
      const accepted = [...ALPHABET].filter((c) => {
        try {
          decodeBase64urlCanonical(prefix + c, n);
          return true;
        } catch {
          return false;
        }
      });
      assert.equal(accepted.join(""), ok);
    }
  });

  describe("literal inputs", () => {
    const zeros = "A".repeat(43);
    it("accepts the contract's example placeholder (32 zero bytes)", () => {
      assert.deepStrictEqual(decodeBase64urlCanonical(zeros, 32), Buffer.alloc(32));
    });
    it("accepts the empty string for 0 bytes", () => {
      assert.deepStrictEqual(decodeBase64urlCanonical("", 0), Buffer.alloc(0));
    });

    const bad: Array<[string, string, number, RegExp]> = [
      ["padding", zeros + "=", 32, /wrong length/],
      ["padding on a short tail", "AA==", 1, /wrong length/],
      ["one character short", zeros.slice(1), 32, /wrong length/],
      ["one character long", zeros + "A", 32, /wrong length/],
      ["non-zero trailing bits (2-byte tail)", "A".repeat(42) + "B", 32, /trailing bits/],
      ["non-zero trailing bits (1-byte tail)", "AB", 1, /trailing bits/],
      ["standard alphabet +", "+" + "A".repeat(42), 32, /character outside/],
      ["standard alphabet /", "A".repeat(41) + "/A", 32, /character outside/],
      ["embedded space", "A".repeat(20) + " " + "A".repeat(22), 32, /character outside/],
      ["padding inside", "AA=A", 3, /character outside/],
      ["non-ASCII", "A".repeat(42) + "\u00c0", 32, /character outside/],
    ];
    for (const [rule, s, n, message] of bad) {
      it(`rejects ${rule}`, () => {
        assert.throws(
          () => decodeBase64urlCanonical(s, n),
          (err: unknown) => {
            assert.ok(err instanceof WireError);
            assert.match(err.message, message);
            return true;
          },
        );
      });
    }

    it("names the field and echoes at most 32 characters", () => {
      assert.throws(
        () => decodeBase64urlCanonical("B".repeat(500), 32, "lease_secret"),
        (err: unknown) => {
          assert.ok(err instanceof WireError);
          assert.equal(err.field, "lease_secret");
          assert.ok(!err.message.includes("B".repeat(33)), err.message);
          return true;
        },
      );
    });

    it("rejects non-strings and refuses a bad expectedBytes", () => {
      assert.throws(() => decodeBase64urlCanonical(42 as unknown as string, 1), WireError);
      for (const n of [-1, 1.5, Number.NaN]) assert.throws(() => decodeBase64urlCanonical("", n), RangeError);
    });
  });
});

import { strict as assert } from "node:assert";
import fc from "fast-check";
import { UINT64_MAX, formatUint64, isUint64, parseUint64 } from "../../src/wire/uint64.js";
import { WireError } from "../../src/wire/wire-error.js";

/** Independent oracle: ASCII digits, no leading zero unless "0", value ≤ max. */
function oracle(s: string): bigint | undefined {
  if (!/^[0-9]+$/.test(s) || (s.length > 1 && s.startsWith("0"))) return undefined;
  const n = BigInt(s);
  return n <= UINT64_MAX ? n : undefined;
}

function agreesWithOracle(s: string): void {
  const expected = oracle(s);
  assert.equal(isUint64(s), expected !== undefined, JSON.stringify(s));
  if (expected === undefined) assert.throws(() => parseUint64(s), WireError, JSON.stringify(s));
  else assert.equal(parseUint64(s), expected);
}

describe("wire/uint64", () => {
  const inRange = fc.bigInt({ min: 0n, max: UINT64_MAX });

  it("UINT64_MAX is 2^64 - 1", () => assert.equal(UINT64_MAX, 2n ** 64n - 1n));

  it("format → parse roundtrips for every value in range", () => {
    fc.assert(
      fc.property(inRange, (n) => {
        const s = formatUint64(n);
        assert.equal(parseUint64(s), n);
        assert.ok(isUint64(s));
      }),
      { numRuns: 2000 },
    );
  });

  it("rejects leading zero, sign, fraction, exponent and whitespace around any value", () => {
    fc.assert(
      fc.property(inRange, fc.constantFrom(" ", "\t", "\n", "\u00a0"), (n, ws) => {
        const s = n.toString();
        for (const bad of [
          `0${s}`,
          `00${s}`,
          `+${s}`,
          `-${s}`,
          `${s}.0`,
          `${s}.`,
          `${s}e0`,
          `${s}E1`,
          `${ws}${s}`,
          `${s}${ws}`,
        ]) {
          assert.throws(() => parseUint64(bad), WireError, bad);
          assert.equal(isUint64(bad), false, bad);
        }
      }),
      { numRuns: 500 },
    );
  });

  it("rejects every value above the maximum", () => {
    fc.assert(
      fc.property(fc.bigInt({ min: UINT64_MAX + 1n, max: 10n ** 40n }), (n) => {
        agreesWithOracle(n.toString());
      }),
    );
  });

  it("agrees with a BigInt oracle on random digit strings", () => {
    const digits = fc.string({ unit: fc.constantFrom(..."0123456789"), maxLength: 22 });
    fc.assert(fc.property(digits, agreesWithOracle), { numRuns: 5000 });
  });

  it("agrees with the oracle on strings mixing digits and near-misses", () => {
    const unit = fc.constantFrom(..."0123456789", "+", "-", ".", "e", "E", " ", "x", "_", "\u0663", "\uff11");
    fc.assert(fc.property(fc.string({ unit, maxLength: 22 }), agreesWithOracle), { numRuns: 5000 });
  });

  it("agrees with the oracle around the maximum", () => {
    fc.assert(
      fc.property(fc.bigInt({ min: UINT64_MAX - 1000n, max: UINT64_MAX + 1000n }), (n) => {
        agreesWithOracle(n.toString());
      }),
    );
  });

  describe("literal inputs", () => {
    const good: Array<[string, bigint]> = [
      ["0", 0n],
      ["1", 1n],
      ["18446744073709551615", UINT64_MAX],
    ];
    for (const [s, n] of good) it(`accepts ${s}`, () => assert.equal(parseUint64(s), n));

    const bad: Array<[string, string]> = [
      ["empty", ""],
      ["leading zero", "01"],
      ["double zero", "00"],
      ["plus sign", "+1"],
      ["minus zero", "-0"],
      ["negative", "-1"],
      ["fraction", "1.0"],
      ["exponent", "1e3"],
      ["leading space", " 1"],
      ["trailing newline", "1\n"],
      ["max + 1", "18446744073709551616"],
      ["20 nines", "99999999999999999999"],
      ["21 digits", "184467440737095516150"],
      ["hex", "0x10"],
      ["underscore separator", "1_000"],
      ["fullwidth digit", "\uff11"],
      ["Arabic-Indic digit", "\u0663"],
    ];
    for (const [rule, s] of bad) {
      it(`rejects ${rule}`, () => {
        assert.throws(() => parseUint64(s), WireError);
        assert.equal(isUint64(s), false);
      });
    }

    it("rejects non-strings without echoing them", () => {
      for (const v of [1, 1n, null, undefined, {}]) {
        assert.throws(() => parseUint64(v as unknown as string), WireError);
        assert.equal(isUint64(v), false);
      }
    });

    it("names the field and echoes at most 32 characters", () => {
      assert.throws(
        () => parseUint64("9".repeat(500), "from_sequence"),
        (err: unknown) => {
          assert.ok(err instanceof WireError);
          assert.equal(err.field, "from_sequence");
          assert.ok(!err.message.includes("9".repeat(33)), err.message);
          return true;
        },
      );
    });
  });

  it("formatUint64 refuses values out of range", () => {
    for (const n of [-1n, UINT64_MAX + 1n]) assert.throws(() => formatUint64(n), RangeError);
    assert.equal(formatUint64(UINT64_MAX), "18446744073709551615");
    assert.equal(formatUint64(0n), "0");
  });
});

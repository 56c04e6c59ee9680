/**
 * uint64 counters and versions travel as canonical decimal strings (docs/protocol.md §1): no sign,
 * no leading zeros, no fraction, no exponent, whitespace or other digits, within
 * 0..18446744073709551615. Canonical form means equal values have equal text, so
 * idempotency comparisons and cursors can compare strings.
 */
import { WireError, quote } from "./wire-error.js";

export const UINT64_MAX = 18446744073709551615n;

/** ASCII digits, at most 20 (more can never fit), so BigInt() below stays cheap. */
const CANONICAL = /^(?:0|[1-9][0-9]{0,19})$/;

/** `field` names the offending field in the error, when the caller knows it. */
export function parseUint64(s: string, field?: string): bigint {
  if (typeof s === "string" && CANONICAL.test(s)) {
    const n = BigInt(s);
    if (n <= UINT64_MAX) return n;
  }
  const what = typeof s === "string" ? quote(s) : typeof s;
  const message = `${field ?? "value"} must be a canonical uint64 decimal string, got ${what}`;
  throw field === undefined ? new WireError(message) : new WireError(message, field);
}

export function isUint64(s: unknown): s is string {
  // The pattern caps the length at 20 digits; 20 digits can still exceed the max.
  return typeof s === "string" && CANONICAL.test(s) && BigInt(s) <= UINT64_MAX;
}

/** Outgoing values: out of range is our bug, not the client's, hence RangeError. */
export function formatUint64(n: bigint): string {
  if (typeof n !== "bigint" || n < 0n || n > UINT64_MAX) {
    throw new RangeError(`not a uint64: ${String(n)}`);
  }
  return n.toString(10);
}

/**
 * Timestamps on the wire: RFC 3339 in UTC with exactly three fractional digits and a
 * "Z", i.e. what Date.prototype.toISOString produces for years 0000-9999. One form
 * only, so emitted timestamps sort and compare as strings.
 */

const SHAPE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

export function formatTimestamp(d: Date): string {
  const t = d.getTime();
  // toISOString switches to the ±YYYYYY form outside 0000-9999, which is not RFC 3339.
  if (!Number.isFinite(t) || d.getUTCFullYear() < 0 || d.getUTCFullYear() > 9999) {
    throw new RangeError("date not representable as an RFC 3339 timestamp");
  }
  return d.toISOString();
}

/** True only for the exact form formatTimestamp emits (rejects 02-30, 24:00, offsets). */
export function isTimestamp(s: unknown): s is string {
  if (typeof s !== "string" || !SHAPE.test(s)) return false;
  const d = new Date(s);
  return Number.isFinite(d.getTime()) && d.toISOString() === s;
}

/**
 * Query strings (docs/protocol.md §1): unknown or repeated parameters are rejected, never ignored.
 * Decoding follows URLSearchParams ('+' is a space, then percent-decoding) except that
 * malformed percent-encoding is an error instead of being passed through.
 */
import { WireError, quote } from "./wire-error.js";

/**
 * `rawQueryString` is the part after '?', without the '?' (Koa's ctx.querystring).
 * Names are compared exactly: "Queue_ID" is unknown when "queue_id" is allowed, since
 * case-variant aliases are rejected. Empty values ("limit=") are returned as "" for
 * the caller's own validation.
 */
export function parseQuery(rawQueryString: string, allowed: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  if (rawQueryString === "") return out;
  let offset = 0;
  for (const segment of rawQueryString.split("&")) {
    if (segment === "") {
      throw new WireError(`empty query parameter at offset ${offset}`);
    }
    const eq = segment.indexOf("=");
    const rawName = eq < 0 ? segment : segment.slice(0, eq);
    const name = decode(rawName, quote(rawName));
    if (eq < 0) {
      throw new WireError(`query parameter ${quote(name)} has no '='`, name.slice(0, 64));
    }
    if (!allowed.includes(name)) {
      // The name is client text of any length: cut it to the 64-character echo budget.
      throw new WireError(`unknown query parameter ${quote(name)}`, name.slice(0, 64));
    }
    if (Object.hasOwn(out, name)) {
      throw new WireError(`repeated query parameter ${quote(name)}`, name);
    }
    // defineProperty: an allowed name is ours, but never let one reach a setter.
    Object.defineProperty(out, name, {
      value: decode(segment.slice(eq + 1), quote(name), name),
      writable: true,
      enumerable: true,
      configurable: true,
    });
    offset += segment.length + 1;
  }
  return out;
}

function decode(s: string, what: string, field?: string): string {
  try {
    return decodeURIComponent(s.replace(/\+/g, " "));
  } catch {
    const message = `malformed percent-encoding in query parameter ${what}`;
    throw field === undefined ? new WireError(message) : new WireError(message, field);
  }
}

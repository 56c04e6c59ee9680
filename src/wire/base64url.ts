/**
 * Canonical unpadded base64url (RFC 4648 §5) for lease secrets and other fixed-size
 * byte strings. Buffer.from(s, 'base64url') is lenient: it skips bad characters,
 * accepts '+', '/', '=' and ignores non-zero trailing bits, so several strings decode to
 * the same bytes. We accept exactly one string per byte sequence: the one
 * encodeBase64url produces.
 */
import { WireError, quote } from "./wire-error.js";

const ALPHABET = /^[A-Za-z0-9_-]*$/;

export function encodeBase64url(buf: Buffer): string {
  return buf.toString("base64url");
}

/** Index of a base64url character in the alphabet (input already checked). */
function sextet(c: number): number {
  if (c >= 0x41 && c <= 0x5a) return c - 0x41; // A-Z
  if (c >= 0x61 && c <= 0x7a) return c - 0x61 + 26; // a-z
  if (c >= 0x30 && c <= 0x39) return c - 0x30 + 52; // 0-9
  return c === 0x2d ? 62 : 63; // '-' or '_'
}

export function decodeBase64urlCanonical(s: string, expectedBytes: number, field?: string): Buffer {
  if (!Number.isSafeInteger(expectedBytes) || expectedBytes < 0) {
    throw new RangeError("expectedBytes must be a non-negative integer");
  }
  const fail = (why: string): never => {
    const got = typeof s === "string" ? quote(s) : typeof s;
    const message = `${field ?? "value"} must be canonical base64url of ${expectedBytes} bytes (${why}), got ${got}`;
    throw field === undefined ? new WireError(message) : new WireError(message, field);
  };
  if (typeof s !== "string") return fail("not a string");
  // Unpadded length: 4 chars per 3 bytes, plus 2 or 3 chars for a 1- or 2-byte tail.
  if (s.length !== Math.ceil((expectedBytes * 4) / 3)) fail("wrong length");
  if (!ALPHABET.test(s)) fail("character outside A-Z a-z 0-9 - _");
  // The last character of a partial group carries 4 (1-byte tail) or 2 (2-byte tail)
  // padding bits; canonical encodings leave them zero.
  const tail = expectedBytes % 3;
  if (tail !== 0) {
    const unusedBits = tail === 1 ? 0b1111 : 0b11;
    if ((sextet(s.charCodeAt(s.length - 1)) & unusedBits) !== 0) fail("non-zero trailing bits");
  }
  return Buffer.from(s, "base64url");
}

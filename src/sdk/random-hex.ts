// Random hex for ids (frame message ids here; the server's ids too, wire/ids.ts), cut
// from a pooled buffer: one randomFillSync per 4 KiB instead of one randomBytes call per
// id — 0.1 instead of 2–3 µs an id (a tight loop on this machine kind), and the
// benchmark's drain profiles charged randomBytes with ~12 % of the SDK consumer's CPU (an
// id per ACK frame) and ~6 % of a node's (an id per deliver frame, per ACK reply, per
// audit record). crypto.randomUUID caches its entropy the same way. Only for names, never
// for secrets: lease secrets and tokens take randomBytes of their own.
import { randomFillSync } from "node:crypto";

const POOL_BYTES = 4096;
const pool = Buffer.allocUnsafe(POOL_BYTES);
let used = POOL_BYTES;

/** `bytes` (at most 4096) fresh random bytes as lowercase hex; no byte is handed out twice. */
export function randomHex(bytes: number): string {
  if (!Number.isInteger(bytes) || bytes < 1 || bytes > POOL_BYTES) throw new RangeError(`randomHex: 1 to ${POOL_BYTES} bytes, not ${bytes}`);
  if (used + bytes > POOL_BYTES) {
    randomFillSync(pool);
    used = 0;
  }
  const hex = pool.toString("hex", used, used + bytes);
  used += bytes;
  return hex;
}

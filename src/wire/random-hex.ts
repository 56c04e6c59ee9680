// Random hex for ids (the server's ids, ids.ts, and the SDK's frame message ids), cut from
// a pooled buffer: one randomFillSync per 4 KiB instead of one randomBytes call per id,
// because ids are made on every frame and every audit record and a call per id is a
// visible share of the CPU of a drain, on the node and in the consumer alike.
// crypto.randomUUID caches its entropy the same way. Only for names, never for secrets:
// lease secrets and tokens take randomBytes of their own.
import { randomFillSync } from "node:crypto";

const POOL_BYTES = 4096;
const pool = Buffer.allocUnsafe(POOL_BYTES);
let used = POOL_BYTES;

/** `bytes` (at most 4096) fresh random bytes as lowercase hex; no byte is handed out twice. */
export function randomHex(bytes: number): string {
  if (!Number.isInteger(bytes) || bytes < 1 || bytes > POOL_BYTES)
    throw new RangeError(`randomHex: 1 to ${POOL_BYTES} bytes, not ${bytes}`);
  if (used + bytes > POOL_BYTES) {
    randomFillSync(pool);
    used = 0;
  }
  const hex = pool.toString("hex", used, used + bytes);
  used += bytes;
  return hex;
}

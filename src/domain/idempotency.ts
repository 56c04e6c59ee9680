// Idempotent management writes (docs/protocol.md §1-2): the first request with a
// key does the write and stores its receipt in the same transaction; a replay with the
// same content gets 200, the ORIGINAL receipt and deduplicated=true; the same key with
// other content gets 409 IDEMPOTENCY_CONFLICT. Keys are scoped to (credential,
// operation kind); content is the canonical body plus the path target.
import { createHash } from "node:crypto";
import type { Tx } from "../db/types.js";
import { claimKey, selectKey, storeReceipt, type IdempotencyKeyRef } from "../db/queries/idempotency.js";
import { OrbitError, unavailable } from "../wire/errors.js";

export interface IdempotentWrite {
  readonly ref: IdempotencyKeyRef;
  /** Canonical request content: canonical body text, plus the path target if any. */
  readonly content: string;
  /**
   * What the request means, where replays compare that (defaults applied, numbers and
   * lists normalised): a replay matches when its content or its meaning does. Both are
   * stored; `content` alone answers a byte-identical replay on a node of an earlier
   * version, which compares only that.
   */
  readonly meaning?: string;
}

export interface Receipt<D> {
  readonly status: number;
  readonly data: D;
  readonly deduplicated: boolean;
}

export function contentDigest(content: string): Buffer {
  return createHash("sha256").update(content).digest();
}

/**
 * Runs `write` once per key inside `tx`. `write` returns the receipt's status and data
 * (without `deduplicated`); a replay returns the stored one.
 */
export async function idempotent<D>(
  tx: Tx,
  w: IdempotentWrite,
  write: () => Promise<{ status: number; data: D }>,
): Promise<Receipt<D>> {
  const digest = contentDigest(w.content);
  const meaning = w.meaning === undefined ? undefined : contentDigest(w.meaning);
  if (await claimKey(tx, w.ref, digest, meaning)) {
    const out = await write();
    await storeReceipt(tx, w.ref, out.status, JSON.stringify(out.data));
    return { ...out, deduplicated: false };
  }
  return replay(tx, w.ref, digest, meaning);
}

/** The stored receipt of a key taken already: a replay's answer, or 409 for other content. */
export async function replay<D>(tx: Tx, ref: IdempotencyKeyRef, digest: Buffer, meaning?: Buffer): Promise<Receipt<D>> {
  const row = await selectKey(tx, ref);
  // Gone between its taking and this read: expired by the housekeeping sweep. Retrying
  // finds no key and does the write as new.
  if (!row) throw unavailable();
  if (row.response_data === null) throw new Error("idempotency key without a receipt");
  const sameContent = Buffer.from(row.request_digest).equals(digest);
  const sameMeaning =
    meaning !== undefined && row.meaning_digest !== null && Buffer.from(row.meaning_digest).equals(meaning);
  if (!sameContent && !sameMeaning) throw new OrbitError("IDEMPOTENCY_CONFLICT");
  return { status: 200, data: JSON.parse(row.response_data) as D, deduplicated: true };
}

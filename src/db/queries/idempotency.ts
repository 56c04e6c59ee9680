// SQL for idempotency_keys.
import type { ResultSetHeader, RowDataPacket } from "mysql2/promise";
import type { Tx } from "../types.js";
import { defer, type Statement } from "../tx.js";

export interface IdempotencyKeyRef {
  readonly credentialId: string;
  readonly operation: string;
  readonly key: string;
}

export interface IdempotencyRow {
  request_digest: Buffer;
  meaning_digest: Buffer | null;
  response_status: number | null;
  response_data: string | null;
}

/**
 * Takes a key and the request digest; inserts the key's row, or — when the key exists —
 * returns false. A concurrent holder of the same key makes this wait for its commit.
 */
export async function claimKey(
  tx: Tx,
  ref: IdempotencyKeyRef,
  digest: Buffer,
  meaningDigest: Buffer | null = null,
): Promise<boolean> {
  const [res] = await tx.query<ResultSetHeader>(
    `INSERT IGNORE INTO idempotency_keys (credential_id, operation, idem_key, request_digest, meaning_digest, created_at)
     VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(3))`,
    [ref.credentialId, ref.operation, ref.key, digest, meaningDigest],
  );
  return res.affectedRows === 1;
}

/**
 * The key with its request digest and its receipt at once, only when `guard` (an SQL
 * condition) holds: for a write whose result is known before it is sent (tasks.ts
 * submitStatements). INSERT IGNORE, as claimKey: a key taken already inserts nothing
 * (affectedRows 0), after waiting for a concurrent holder's commit.
 */
export function keyWithReceiptStatement(
  ref: IdempotencyKeyRef,
  digest: Buffer,
  status: number,
  data: string,
  guard: string,
): Statement {
  return {
    sql: `INSERT IGNORE INTO idempotency_keys
            (credential_id, operation, idem_key, request_digest, response_status, response_data, created_at)
          SELECT ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(3) FROM DUAL WHERE ${guard}`,
    params: [ref.credentialId, ref.operation, ref.key, digest, status, data],
  };
}

/**
 * Takes a key; returns its stored digest and receipt. A locking read: it sees the latest
 * committed row even when the transaction's snapshot is older.
 */
export async function selectKey(tx: Tx, ref: IdempotencyKeyRef): Promise<IdempotencyRow | undefined> {
  const [rows] = await tx.query<(IdempotencyRow & RowDataPacket)[]>(
    `SELECT request_digest, meaning_digest, response_status, response_data FROM idempotency_keys
      WHERE credential_id = ? AND operation = ? AND idem_key = ?
      LOCK IN SHARE MODE`,
    [ref.credentialId, ref.operation, ref.key],
  );
  return rows[0];
}

/**
 * Stores the receipt of the write the key was claimed for. Deferred (tx.ts): it goes with
 * the COMMIT (the key's row is this transaction's own, so it changes exactly that row).
 */
export function storeReceipt(tx: Tx, ref: IdempotencyKeyRef, status: number, data: string): Promise<void> {
  return defer(tx, {
    sql: `UPDATE idempotency_keys SET response_status = ?, response_data = ?
      WHERE credential_id = ? AND operation = ? AND idem_key = ?`,
    params: [status, data, ref.credentialId, ref.operation, ref.key],
  });
}

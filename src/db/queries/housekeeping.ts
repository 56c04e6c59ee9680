// SQL of the housekeeping sweep (domain/housekeeping.ts): each statement deletes at most
// `limit` of the oldest rows past their retention, in its own autocommit, through an index
// range (time-first ids, or idempotency_keys_created).
import type { ResultSetHeader } from "mysql2/promise";
import type { Pool } from "../types.js";

/** Idempotency keys and their receipts created before `cutoff`. */
export async function deleteReceiptsBefore(pool: Pool, cutoff: Date, limit: number): Promise<number> {
  const [res] = await pool.query<ResultSetHeader>(
    "DELETE FROM idempotency_keys WHERE created_at < ? ORDER BY created_at LIMIT ?",
    [cutoff, limit],
  );
  return res.affectedRows;
}

/** Audit records written before the time of `cutoffId` (ids are time-first). */
export async function deleteAuditBefore(pool: Pool, cutoffId: string, limit: number): Promise<number> {
  const [res] = await pool.query<ResultSetHeader>("DELETE FROM audit_records WHERE id < ? ORDER BY id LIMIT ?", [
    cutoffId,
    limit,
  ]);
  return res.affectedRows;
}

/**
 * Event sessions opened before the time of `cutoffId` and closed before `cutoff`, that no
 * LEASED delivery names: a lease of a closed session stays until a claim recovers it
 * (docs/operations.md), and its row with it.
 */
export async function deleteClosedSessionsBefore(
  pool: Pool,
  cutoffId: string,
  cutoff: Date,
  limit: number,
): Promise<number> {
  const [res] = await pool.query<ResultSetHeader>(
    `DELETE FROM event_sessions
      WHERE id < ? AND closed_at < ?
        AND NOT EXISTS (SELECT 1 FROM deliveries d
                         WHERE d.session_id = event_sessions.id AND d.state = 'LEASED')
      ORDER BY id LIMIT ?`,
    [cutoffId, cutoff, limit],
  );
  return res.affectedRows;
}

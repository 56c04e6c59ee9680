// SQL of the housekeeping sweep (domain/housekeeping.ts): each statement deletes at most
// `limit` of the oldest rows past their retention, in its own autocommit, through an index
// range (time-first ids, or idempotency_keys_created).
import type { ResultSetHeader, RowDataPacket } from "mysql2/promise";
import type { Pool, Tx } from "../types.js";

/** Idempotency keys and their receipts created before `cutoff`. */
export async function deleteReceiptsBefore(pool: Pool, cutoff: Date, limit: number): Promise<number> {
  const [res] = await pool.query<ResultSetHeader>(
    "DELETE FROM idempotency_keys WHERE created_at < ? ORDER BY created_at LIMIT ?",
    [cutoff, limit],
  );
  return res.affectedRows;
}

/**
 * Audit records written before `cutoff`, read through the id range of that time (ids are
 * time-first); created_at guards rows whose id predates time-first ids.
 */
export async function deleteAuditBefore(pool: Pool, cutoffId: string, cutoff: Date, limit: number): Promise<number> {
  const [res] = await pool.query<ResultSetHeader>(
    "DELETE FROM audit_records WHERE id < ? AND created_at < ? ORDER BY id LIMIT ?",
    [cutoffId, cutoff, limit],
  );
  return res.affectedRows;
}

/**
 * Event sessions opened before the time of `cutoffId`, closed before `cutoff` or never
 * closed, that no LEASED delivery names: a lease of a closed session stays until a claim
 * recovers it (docs/operations.md), and its row with it. A session whose node died is
 * never marked closed; the row is a record of the connection that nothing reads while it
 * lives, so one still open that long goes as well, and its close later updates nothing.
 */
export async function deleteSessionsBefore(pool: Pool, cutoffId: string, cutoff: Date, limit: number): Promise<number> {
  const [res] = await pool.query<ResultSetHeader>(
    `DELETE FROM event_sessions
      WHERE id < ? AND (closed_at IS NULL OR closed_at < ?)
        AND NOT EXISTS (SELECT 1 FROM deliveries d
                         WHERE d.subscription_id = event_sessions.subscription_id
                           AND d.state = 'LEASED' AND d.session_id = event_sessions.id)
      ORDER BY id LIMIT ?`,
    [cutoffId, cutoff, limit],
  );
  return res.affectedRows;
}

/** A task's final states: nothing changes it once in one. */
const FINISHED = "('SUCCEEDED', 'FAILED', 'CANCELLED')";

/**
 * Finished tasks with ids after `afterId`, created before the time of `cutoffId` and last
 * changed before `cutoff`, that nothing still needs: each of their result events is
 * numbered, no subscription of their queue that takes its type is still behind one of
 * them (it would deliver it), and every delivery of them is ACKED (a consumer may read the
 * task while it handles its result). Read in id order along the primary key and locked,
 * for the deletes that follow in the same transaction.
 */
export async function selectExpiredTasks(
  tx: Tx,
  afterId: string,
  cutoffId: string,
  cutoff: Date,
  limit: number,
): Promise<string[]> {
  const [rows] = await tx.query<RowDataPacket[]>(
    `SELECT t.id FROM tasks t FORCE INDEX (PRIMARY)
      WHERE t.id > ? AND t.id < ? AND t.state IN ${FINISHED} AND t.updated_at < ?
        AND NOT EXISTS (SELECT 1 FROM result_events r WHERE r.aggregate_id = t.id AND r.sequence IS NULL)
        AND NOT EXISTS (SELECT 1 FROM result_events r JOIN subscriptions s ON s.queue_id = r.queue_id
                         WHERE r.aggregate_id = t.id AND s.cursor_sequence < r.sequence
                           AND FIND_IN_SET(r.type, s.types) > 0)
        AND NOT EXISTS (SELECT 1 FROM result_events r JOIN deliveries d ON d.event_id = r.id
                         WHERE r.aggregate_id = t.id AND d.state <> 'ACKED')
      ORDER BY t.id LIMIT ? FOR UPDATE SKIP LOCKED`,
    [afterId, cutoffId, cutoff, limit],
  );
  return rows.map((r) => r.id as string);
}

/** The tasks and their attempts (attempts first: they reference their task). */
export async function deleteTasks(tx: Tx, ids: readonly string[]): Promise<number> {
  await tx.query("DELETE FROM task_attempts WHERE task_id IN (?)", [ids]);
  const [res] = await tx.query<ResultSetHeader>(`DELETE FROM tasks WHERE id IN (?) AND state IN ${FINISHED}`, [ids]);
  return res.affectedRows;
}

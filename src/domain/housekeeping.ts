// Bounded storage (docs/operations.md, Retention): idempotency receipts, audit records,
// event sessions and finished tasks with their attempts are deleted once older than
// their retention, by every node's background sweep, in small batches. Deleting the same
// rows from several nodes at once is harmless: each batch deletes what is still there.
import type { HousekeepingRetention } from "../config/index.js";
import type { Pool } from "../db/types.js";
import {
  deleteAuditBefore,
  deleteSessionsBefore,
  deleteReceiptsBefore,
  deleteTasks,
  selectExpiredTasks,
} from "../db/queries/housekeeping.js";
import { withTransaction } from "../db/tx.js";
import { rowIdPrefix } from "../wire/ids.js";

/** Rows per DELETE: short statements that hold few locks. */
export const HOUSEKEEPING_BATCH = 500;
/** Batches per table per sweep: a sweep ends in bounded time; a backlog goes over several. */
export const HOUSEKEEPING_MAX_BATCHES = 20;

/**
 * Where a node's task sweep goes on: after the last task it deleted, so that old tasks it
 * cannot delete yet (under review, results still owed) are read once per pass through the
 * table, not at every sweep. A pass that reaches the cutoff starts over.
 */
export interface HousekeepingCursor {
  taskAfter: string;
}

export interface HousekeepingResult {
  readonly receipts: number;
  readonly audits: number;
  readonly sessions: number;
  readonly tasks: number;
}

/** The smallest row id of time `ms`: every id made before it sorts below. */
const idAt = (ms: number): string => rowIdPrefix(ms) + "0".repeat(20);

/** Batches until one is short or the sweep's share is spent; a failure ends this kind only. */
async function inBatches(kind: string, deleteBatch: () => Promise<number>, failed: string[]): Promise<number> {
  let total = 0;
  try {
    for (let i = 0; i < HOUSEKEEPING_MAX_BATCHES; i++) {
      const n = await deleteBatch();
      total += n;
      if (n < HOUSEKEEPING_BATCH) break;
    }
  } catch {
    failed.push(kind);
  }
  return total;
}

/** One sweep; `failed` names the kinds whose deletes failed (the others went on). */
export async function sweepExpired(
  pool: Pool,
  r: HousekeepingRetention,
  now: number = Date.now(),
  cursor: HousekeepingCursor = { taskAfter: "" },
): Promise<HousekeepingResult & { failed: string[] }> {
  const failed: string[] = [];
  const receipts = await inBatches(
    "receipts",
    () => deleteReceiptsBefore(pool, new Date(now - r.receiptMs), HOUSEKEEPING_BATCH),
    failed,
  );
  const audits = await inBatches(
    "audits",
    () => deleteAuditBefore(pool, idAt(now - r.auditMs), new Date(now - r.auditMs), HOUSEKEEPING_BATCH),
    failed,
  );
  const sessions = await inBatches(
    "sessions",
    () => deleteSessionsBefore(pool, idAt(now - r.sessionMs), new Date(now - r.sessionMs), HOUSEKEEPING_BATCH),
    failed,
  );
  const tasks = await inBatches(
    "tasks",
    () =>
      // READ COMMITTED: the scan locks only the rows it selects, not every old task it
      // passes over (one under review may be resolved meanwhile).
      withTransaction(
        pool,
        async (tx) => {
          const cutoff = now - r.taskMs;
          const ids = await selectExpiredTasks(
            tx,
            cursor.taskAfter,
            idAt(cutoff),
            new Date(cutoff),
            HOUSEKEEPING_BATCH,
          );
          cursor.taskAfter = ids.length < HOUSEKEEPING_BATCH ? "" : ids[ids.length - 1]!;
          return ids.length === 0 ? 0 : deleteTasks(tx, ids);
        },
        undefined,
        "READ COMMITTED",
      ),
    failed,
  );
  return { receipts, audits, sessions, tasks, failed };
}

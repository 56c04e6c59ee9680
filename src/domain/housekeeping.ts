// Bounded storage (docs/operations.md, Retention): idempotency receipts, audit records,
// closed event sessions and finished tasks with their attempts are deleted once older than
// their retention, by every node's background sweep, in small batches. Deleting the same rows from several nodes at once is
// harmless: each batch deletes what is still there.
import type { HousekeepingRetention } from "../config/index.js";
import type { Pool } from "../db/types.js";
import {
  deleteAuditBefore,
  deleteClosedSessionsBefore,
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

export interface HousekeepingResult {
  readonly receipts: number;
  readonly audits: number;
  readonly sessions: number;
  readonly tasks: number;
}

/** The smallest row id of time `ms`: every id made before it sorts below. */
const idAt = (ms: number): string => rowIdPrefix(ms) + "0".repeat(20);

async function inBatches(deleteBatch: () => Promise<number>): Promise<number> {
  let total = 0;
  for (let i = 0; i < HOUSEKEEPING_MAX_BATCHES; i++) {
    const n = await deleteBatch();
    total += n;
    if (n < HOUSEKEEPING_BATCH) break;
  }
  return total;
}

export async function sweepExpired(
  pool: Pool,
  r: HousekeepingRetention,
  now: number = Date.now(),
): Promise<HousekeepingResult> {
  const receipts = await inBatches(() => deleteReceiptsBefore(pool, new Date(now - r.receiptMs), HOUSEKEEPING_BATCH));
  const audits = await inBatches(() => deleteAuditBefore(pool, idAt(now - r.auditMs), HOUSEKEEPING_BATCH));
  const sessions = await inBatches(() =>
    deleteClosedSessionsBefore(pool, idAt(now - r.sessionMs), new Date(now - r.sessionMs), HOUSEKEEPING_BATCH),
  );
  const tasks = await inBatches(() =>
    withTransaction(pool, async (tx) => {
      const ids = await selectExpiredTasks(tx, idAt(now - r.taskMs), new Date(now - r.taskMs), HOUSEKEEPING_BATCH);
      return ids.length === 0 ? 0 : deleteTasks(tx, ids);
    }),
  );
  return { receipts, audits, sessions, tasks };
}

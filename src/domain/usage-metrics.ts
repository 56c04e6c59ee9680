// The database gauges of GET /metrics, read in the background (background.ts) and kept in
// memory, so that a scrape runs no query: how far materialisation lags the committed
// head, and how old the oldest PENDING delivery is, per subscription and at their worst.
// Two queries a refresh; the second reads only PENDING rows, each subscription's through
// deliveries_state (at most max_pending, 1000, apiece) — grouped over the whole table
// instead it would read every delivery ever made on every refresh, and deliveries are
// kept. The age is by the node's clock, the one that wrote available_at (the database's
// own clock may differ from the nodes', which would put the gauge off by that much, or
// stuck at 0).
import type { RowDataPacket } from "mysql2/promise";
import type { Pool } from "../db/types.js";
import {
  materialisationLag,
  maxMaterialisationLag,
  maxOldestPendingAge,
  metricsRefreshErrors,
  oldestPendingAge,
  refreshed,
} from "../metrics.js";
import { nowMs } from "../clock.js";

/** Reads the gauges; on failure they keep their last values and the error counter moves. */
export async function refreshDatabaseGauges(pool: Pool, now = nowMs()): Promise<{ subscriptions: number }> {
  let lag: RowDataPacket[];
  let pending: RowDataPacket[];
  try {
    [lag] = await pool.query<RowDataPacket[]>(
      `SELECT s.id, CAST(n.head_sequence AS SIGNED) - CAST(s.cursor_sequence AS SIGNED) AS lag
         FROM subscriptions s JOIN namespace_streams n ON n.namespace_id = s.namespace_id`,
    );
    [pending] = await pool.query<RowDataPacket[]>(
      `SELECT o.subscription_id, TIMESTAMPDIFF(MICROSECOND, o.oldest, ?) / 1e6 AS age
         FROM (SELECT s.id AS subscription_id,
                      (SELECT MIN(d.available_at) FROM deliveries d FORCE INDEX (deliveries_state)
                        WHERE d.subscription_id = s.id AND d.state = 'PENDING') AS oldest
                 FROM subscriptions s) o
        WHERE o.oldest IS NOT NULL`,
      [now],
    );
  } catch (e) {
    metricsRefreshErrors.inc();
    throw e;
  }
  // Set together, after both reads: a scrape sees one refresh or the one before, never half.
  materialisationLag.reset();
  let worstLag = 0;
  for (const r of lag) {
    const v = Math.max(0, Number(r.lag));
    materialisationLag.set({ subscription_id: r.id as string }, v);
    worstLag = Math.max(worstLag, v);
  }
  oldestPendingAge.reset();
  let worstAge = 0;
  for (const r of pending) {
    const v = Math.max(0, Number(r.age));
    oldestPendingAge.set({ subscription_id: r.subscription_id as string }, v);
    worstAge = Math.max(worstAge, v);
  }
  maxMaterialisationLag.set(worstLag);
  maxOldestPendingAge.set(worstAge);
  refreshed();
  return { subscriptions: lag.length };
}

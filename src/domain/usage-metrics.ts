// The per-subscription gauges of GET /metrics, read from the database at scrape time:
// how far materialisation lags the committed head, and how old the oldest PENDING
// delivery is. Two queries per scrape; the second reads only PENDING rows, each
// subscription's through deliveries_state (at most max_pending, 1000, apiece) — grouped
// over the whole table instead it would read every delivery ever made on every scrape,
// and deliveries are kept. The age is by the node's clock, the one that wrote
// available_at (the database's own clock may differ from the nodes', which would put
// the gauge off by that much, or stuck at 0).
import type { RowDataPacket } from "mysql2/promise";
import type { Pool } from "../db/types.js";
import { materialisationLag, oldestPendingAge } from "../metrics.js";
import { nowMs } from "../clock.js";

export async function refreshDatabaseGauges(pool: Pool, now = nowMs()): Promise<void> {
  const [lag] = await pool.query<RowDataPacket[]>(
    `SELECT s.id, CAST(n.head_sequence AS SIGNED) - CAST(s.cursor_sequence AS SIGNED) AS lag
       FROM subscriptions s JOIN namespace_streams n ON n.namespace_id = s.namespace_id`,
  );
  const [pending] = await pool.query<RowDataPacket[]>(
    `SELECT o.subscription_id, TIMESTAMPDIFF(MICROSECOND, o.oldest, ?) / 1e6 AS age
       FROM (SELECT s.id AS subscription_id,
                    (SELECT MIN(d.available_at) FROM deliveries d FORCE INDEX (deliveries_state)
                      WHERE d.subscription_id = s.id AND d.state = 'PENDING') AS oldest
               FROM subscriptions s) o
      WHERE o.oldest IS NOT NULL`,
    [now],
  );
  materialisationLag.reset();
  for (const r of lag) materialisationLag.set({ subscription_id: r.id as string }, Math.max(0, Number(r.lag)));
  oldestPendingAge.reset();
  for (const r of pending)
    oldestPendingAge.set({ subscription_id: r.subscription_id as string }, Math.max(0, Number(r.age)));
}

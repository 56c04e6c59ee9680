// The per-subscription gauges of GET /metrics, read from the database at scrape time:
// how far materialisation lags the committed head, and how old the oldest PENDING
// delivery is. Two indexed queries per scrape, whatever the number of subscriptions.
import type { RowDataPacket } from "mysql2/promise";
import type { Pool } from "../db/types.js";
import { materialisationLag, oldestPendingAge } from "../metrics.js";

export async function refreshDatabaseGauges(pool: Pool): Promise<void> {
  const [lag] = await pool.query<RowDataPacket[]>(
    `SELECT s.id, CAST(n.head_sequence AS SIGNED) - CAST(s.cursor_sequence AS SIGNED) AS lag
       FROM subscriptions s JOIN namespace_streams n ON n.namespace_id = s.namespace_id`,
  );
  const [pending] = await pool.query<RowDataPacket[]>(
    `SELECT subscription_id, TIMESTAMPDIFF(MICROSECOND, MIN(available_at), UTC_TIMESTAMP(6)) / 1e6 AS age
       FROM deliveries WHERE state = 'PENDING' GROUP BY subscription_id`,
  );
  materialisationLag.reset();
  for (const r of lag) materialisationLag.set({ subscription_id: r.id as string }, Math.max(0, Number(r.lag)));
  oldestPendingAge.reset();
  for (const r of pending) oldestPendingAge.set({ subscription_id: r.subscription_id as string }, Math.max(0, Number(r.age)));
}

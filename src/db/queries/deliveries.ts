// SQL for deliveries. The rules that use them are in domain/deliveries.ts (management)
// and domain/delivery-engine.ts (materialise, claim, ACK).
import type { ResultSetHeader, RowDataPacket } from "mysql2/promise";
import type { Pool, Tx } from "../types.js";

export type DeliveryState = "PENDING" | "LEASED" | "ACKED" | "EXPIRED";

export interface DeliveryRow {
  id: string;
  subscription_id: string;
  event_id: string;
  sequence: string;
  revision: string;
  state: DeliveryState;
  created_at: Date;
  available_at: Date;
  lease_epoch: string;
  lease_until: Date | null;
  attempts: number;
  attempt_budget: number;
  acknowledged_at: Date | null;
}

/** Never the secret digest or the session: they do not leave the engine. */
export const DELIVERY_COLUMNS = `id, subscription_id, event_id, sequence, revision, state, created_at, available_at,
  lease_epoch, lease_until, attempts, attempt_budget, acknowledged_at`;

/** Takes a subscription and a delivery id; returns the delivery only within that subscription. */
export async function selectDelivery(db: Pool | Tx, subscriptionId: string, id: string, lock = false): Promise<DeliveryRow | undefined> {
  const [rows] = await db.query<(DeliveryRow & RowDataPacket)[]>(
    `SELECT ${DELIVERY_COLUMNS} FROM deliveries WHERE id = ? AND subscription_id = ?${lock ? " FOR UPDATE" : ""}`,
    [id, subscriptionId],
  );
  return rows[0];
}

/** Takes a subscription, an optional state and a page position; newest first by creation, then id. */
export async function selectDeliveryPage(
  db: Pool,
  subscriptionId: string,
  state: DeliveryState | undefined,
  after: { createdAt: Date; id: string } | undefined,
  limit: number,
): Promise<DeliveryRow[]> {
  const where = ["subscription_id = ?"];
  const params: unknown[] = [subscriptionId];
  if (state) {
    where.push("state = ?");
    params.push(state);
  }
  if (after) {
    where.push("(created_at < ? OR (created_at = ? AND id < ?))");
    params.push(after.createdAt, after.createdAt, after.id);
  }
  const [rows] = await db.query<(DeliveryRow & RowDataPacket)[]>(
    `SELECT ${DELIVERY_COLUMNS} FROM deliveries WHERE ${where.join(" AND ")} ORDER BY created_at DESC, id DESC LIMIT ?`,
    [...params, limit],
  );
  return rows;
}

/**
 * Manual retry (spec §4): EXPIRED → PENDING with more budget, available now; attempts,
 * epoch and identity stay. Guarded by state and revision.
 */
export async function retryDelivery(tx: Tx, id: string, expectedRevision: string, additional: number, now: Date): Promise<boolean> {
  const [res] = await tx.query<ResultSetHeader>(
    `UPDATE deliveries SET state = 'PENDING', attempt_budget = attempt_budget + ?, available_at = ?, revision = revision + 1
      WHERE id = ? AND revision = ? AND state = 'EXPIRED'`,
    [additional, now, id, expectedRevision],
  );
  return res.affectedRows === 1;
}

// Delivery history, detail and manual retry (docs/protocol.md §4). Reads never change state; a
// delivery id is resolved only under its own subscription.
import type { components } from "../../generated/http/openapi-types.js";
import type { Pool, Tx } from "../db/types.js";
import {
  retryDelivery,
  selectDelivery,
  selectDeliveryPage,
  type DeliveryRow,
  type DeliveryState,
} from "../db/queries/deliveries.js";
import { selectEventById } from "../db/queries/result-log.js";
import type { SubscriptionRow } from "../db/queries/subscriptions.js";
import { insertAudit } from "../db/queries/audit.js";
import { OrbitError, notFound, stateConflict } from "../wire/errors.js";
import { formatTimestamp } from "../wire/time.js";
import { idempotent, type Receipt } from "./idempotency.js";
import { newId, type Caller } from "./identity.js";
import { DEFAULT_PAGE_LIMIT, decodeCursor, page, type Binding } from "./paging.js";
import { toWireEvent, type ResultEventWire } from "./result-log.js";
import { getSubscription } from "./subscriptions.js";
import { nowMs } from "../clock.js";

/** docs/protocol.md §4: the cumulative attempt budget of one delivery. */
export const MAX_ATTEMPT_BUDGET = 1_000_000;

/** The wire EventDelivery of docs/protocol.md §4, as the contract defines it. */
export type DeliveryWire = components["schemas"]["EventDelivery"];

/** lease_until only when LEASED, acknowledged_at only when ACKED (protocol §4). */
export function toWireDelivery(d: DeliveryRow): DeliveryWire {
  return {
    id: d.id,
    subscription_id: d.subscription_id,
    event_id: d.event_id,
    sequence: d.sequence,
    revision: d.revision,
    state: d.state,
    created_at: formatTimestamp(d.created_at),
    available_at: formatTimestamp(d.available_at),
    lease_epoch: d.lease_epoch,
    ...(d.state === "LEASED" && d.lease_until ? { lease_until: formatTimestamp(d.lease_until) } : {}),
    attempts: d.attempts,
    attempt_budget: d.attempt_budget,
    ...(d.state === "ACKED" && d.acknowledged_at ? { acknowledged_at: formatTimestamp(d.acknowledged_at) } : {}),
  };
}

/** A page of the deliveries of `s`, a subscription the caller owns (getSubscription). */
export async function listDeliveries(
  pool: Pool,
  caller: Caller,
  s: SubscriptionRow,
  q: { state?: DeliveryState; limit?: number; cursor?: string },
): Promise<{ items: DeliveryWire[]; next_cursor?: string }> {
  const binding: Binding = {
    list: `deliveries:${s.id}`,
    credentialId: caller.credentialId,
    namespaceId: caller.namespaceId,
    filter: q.state ?? "",
  };
  const after = q.cursor === undefined ? undefined : decodeCursor(q.cursor, binding);
  const limit = q.limit ?? DEFAULT_PAGE_LIMIT;
  return page(await selectDeliveryPage(pool, s.id, q.state, after, limit + 1), limit, binding, toWireDelivery);
}

export async function getDelivery(
  pool: Pool,
  caller: Caller,
  subscriptionId: string,
  deliveryId: string,
): Promise<{ delivery: DeliveryWire; event: ResultEventWire }> {
  const s = await getSubscription(pool, caller, subscriptionId);
  const d = await selectDelivery(pool, s.id, deliveryId);
  if (!d) throw notFound();
  const e = await selectEventById(pool, d.event_id);
  // Retention keeps the events of deliveries that are not ACKED; an ACKED delivery can
  // outlive its event.
  if (!e) throw new OrbitError("EVENT_HISTORY_EXPIRED", "the delivery's event was purged by retention");
  return { delivery: toWireDelivery(d), event: toWireEvent(e) };
}

/**
 * The scope check of a delivery write (the order of checks puts its 404 before the body's 400): the
 * caller's subscription, and the delivery under it. The write checks both again in its
 * transaction.
 */
export async function deliveryInScope(
  pool: Pool,
  caller: Caller,
  subscriptionId: string,
  deliveryId: string,
): Promise<void> {
  const s = await getSubscription(pool, caller, subscriptionId);
  if (!(await selectDelivery(pool, s.id, deliveryId))) throw notFound();
}

export interface RetryInput {
  readonly subscriptionId: string;
  readonly deliveryId: string;
  readonly expectedRevision: string;
  readonly additionalAttempts: number;
  readonly reason: string;
  readonly key: string;
  readonly canonicalBody: string;
}

/** EXPIRED → PENDING with 1-100 more attempts of budget; audited; replay adds nothing. */
export async function retry(tx: Tx, caller: Caller, r: RetryInput): Promise<Receipt<{ delivery: DeliveryWire }>> {
  const ref = { credentialId: caller.credentialId, operation: "deliveries.retry", key: r.key };
  const target = `${r.subscriptionId}/${r.deliveryId}\n`;
  // What it means (additional_attempts 2.0 is 2), as for a create (subscriptions.ts createMeaning).
  const meaning = JSON.stringify({
    additional_attempts: r.additionalAttempts,
    expected_revision: r.expectedRevision,
    reason: r.reason,
  });
  return idempotent(tx, { ref, content: target + r.canonicalBody, meaning: target + meaning }, async () => {
    const s = await getSubscription(tx, caller, r.subscriptionId);
    const d = await selectDelivery(tx, s.id, r.deliveryId, true);
    if (!d) throw notFound();
    if (d.revision !== r.expectedRevision)
      throw stateConflict(`expected_revision is ${r.expectedRevision}, the delivery is at ${d.revision}`);
    if (d.state !== "EXPIRED") throw stateConflict(`only an EXPIRED delivery can be retried; this one is ${d.state}`);
    if (d.attempt_budget + r.additionalAttempts > MAX_ATTEMPT_BUDGET) {
      throw stateConflict(`the cumulative attempt budget may not exceed ${MAX_ATTEMPT_BUDGET}`);
    }
    const now = nowMs();
    if (!(await retryDelivery(tx, d.id, d.revision, r.additionalAttempts, now)))
      throw new Error("delivery changed under its lock");
    const after = (await selectDelivery(tx, s.id, d.id))!;
    await insertAudit(tx, {
      id: newId(),
      namespaceId: caller.namespaceId,
      credentialId: caller.credentialId,
      subscriptionId: s.id,
      deliveryId: d.id,
      action: "delivery.retry",
      details: { additional_attempts: r.additionalAttempts, attempt_budget: after.attempt_budget },
      reason: r.reason,
      revisionBefore: d.revision,
      revisionAfter: after.revision,
      at: now,
    });
    return { status: 200, data: { delivery: toWireDelivery(after) } };
  });
}

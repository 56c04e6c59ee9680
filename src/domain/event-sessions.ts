// Event sessions (docs/protocol.md §5) as the database keeps them: the checks a hello and
// every ping make of the caller and the subscription, the session row opened at the
// welcome and closed when the connection ends, and the namespace heads a node polls for
// results committed by other nodes.
import { nowMs } from "../clock.js";
import type { Pool } from "../db/types.js";
import { selectSessionLeases } from "../db/queries/deliveries.js";
import { closeSession, insertSession, selectHeads } from "../db/queries/sessions.js";
import { selectSubscription, type SubscriptionRow } from "../db/queries/subscriptions.js";
import { authenticate, requireAction } from "./identity.js";
import { owned } from "./subscriptions.js";

export type { SubscriptionRow };

/**
 * The subscription if the token may consume it now: the credential looked up again
 * (401, 403) and the subscription's owner and queue scope (404), in the order of
 * docs/protocol.md §1. The hello and every ping ask (§7: the ping reply re-checks the
 * credential and the scope).
 */
export async function consumableSubscription(
  pool: Pool,
  authorization: string,
  subscriptionId: string,
): Promise<SubscriptionRow> {
  const [caller, sub] = await Promise.all([
    authenticate(pool, authorization),
    selectSubscription(pool, subscriptionId),
  ]);
  requireAction(caller, "events:consume");
  return owned(caller, sub);
}

/** What a ping's check read (docs/protocol.md §7). */
export interface PingRead {
  readonly enabled: boolean;
  /** PENDING + LEASED + EXPIRED deliveries of the subscription. */
  readonly backlog: number;
  /**
   * The deliveries LEASED to the session now, when asked for: one it sent that is not
   * among them was ACKed on another connection (perhaps another node's), or recovered.
   */
  readonly leased: ReadonlySet<string> | undefined;
}

/** A ping's check: consumableSubscription, and the session's leases when `sessionId` is given. */
export async function pingRead(
  pool: Pool,
  authorization: string,
  subscriptionId: string,
  sessionId: string | undefined,
): Promise<PingRead> {
  const [sub, leased] = await Promise.all([
    consumableSubscription(pool, authorization, subscriptionId),
    sessionId === undefined ? undefined : selectSessionLeases(pool, subscriptionId, sessionId),
  ]);
  return { enabled: Boolean(sub.enabled), backlog: sub.pending_count, leased };
}

export interface NewSession {
  readonly id: string;
  readonly subscriptionId: string;
  readonly credentialId: string;
  readonly capacity: number;
  readonly nodeId: string;
}

/** Writes the session row of a hello, opened now. */
export function openSession(pool: Pool, s: NewSession): Promise<void> {
  return insertSession(pool, { ...s, now: nowMs() });
}

/** Records that the session closed now; a session closed already keeps its first close. */
export function recordSessionClose(pool: Pool, id: string): Promise<void> {
  return closeSession(pool, id, nowMs());
}

/** The result log's head of each namespace: a cheap poll for results committed elsewhere. */
export function namespaceHeads(pool: Pool, namespaceIds: readonly string[]): Promise<Map<string, string>> {
  return selectHeads(pool, namespaceIds);
}

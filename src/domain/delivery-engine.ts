// The delivery engine (spec §4-6): materialise deliveries from the result log, lease
// them to a connection, recover expired leases, and take ACKs. Every decision is made in
// the database, inside one transaction, so several nodes consuming one subscription
// agree (platform.md: nothing that decides delivery lives only in a node's memory).
//
// One claim is one READ COMMITTED transaction:
//   lock the subscription row        — claims of one subscription take turns, across nodes
//   recover expired leases           — PENDING within budget, else EXPIRED
//   materialise                      — from cursor_sequence up to the committed head,
//                                      while pending_count < max_pending
//   lease up to capacity − held      — epoch+1, attempts+1, lease_until, new secret digest
// and only after COMMIT does the caller send event.deliver: the lease is durable first.
// READ COMMITTED keeps the recovery scan from gap-locking LEASED rows that concurrent
// ACKs are updating; the subscription row lock is what serialises claims.
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import type { Pool, Tx } from "../db/types.js";
import { withTransaction } from "../db/tx.js";
import {
  countHeld, countPending, countReady, insertDeliveries, leaseDeliveries, markAcked, recoverExpiredLeases, selectClaimable,
  selectProofs, selectWithEvents, updateCursor,
} from "../db/queries/deliveries.js";
import { selectMatchingEvents } from "../db/queries/result-log.js";
import { selectSubscriptionForClaim, type SubscriptionRow } from "../db/queries/subscriptions.js";
import { insertAudits } from "../db/queries/audit.js";
import { OrbitError } from "../wire/errors.js";
import { encodeBase64url } from "../wire/base64url.js";
import { formatTimestamp } from "../wire/time.js";
import { newId } from "./identity.js";
import { readStream, toWireEvent, type ResultEventWire } from "./result-log.js";
import { toWireDelivery, type DeliveryWire } from "./deliveries.js";
import { nowMs } from "./task-state.js";
import { credentialRevoked } from "../db/queries/identity.js";
import * as metrics from "../metrics.js";

const LEASE_SECRET_BYTES = 32;
/** Materialise when fewer PENDING deliveries than this are ready (4 claims of 8). */
const READY_LOW_WATER = 32;

export function secretDigest(secret: Buffer): Buffer {
  return createHash("sha256").update(secret).digest();
}

export interface Lease {
  readonly delivery: DeliveryWire;
  readonly event: ResultEventWire;
  /** base64url of the 32 random bytes; sent once, only its digest is stored. */
  readonly leaseSecret: string;
}

export interface ClaimRequest {
  readonly subscriptionId: string;
  /** The connection's credential: a claim re-checks that it was not revoked. */
  readonly credentialId?: string;
  readonly sessionId: string;
  readonly capacity: number;
  readonly leaseDurationMs: number;
  /** At most this many new leases (the connection's free write slots); default capacity. */
  readonly maxLeases?: number;
}

export interface ClaimOutcome {
  readonly leases: Lease[];
  /** The subscription is paused: nothing was materialised or leased. */
  readonly paused: boolean;
  /** LEASED deliveries the session holds after this claim. */
  readonly held: number;
}

/**
 * Materialises from the log into the subscription's backlog. Never skips: when the next
 * needed events were purged (the cursor is below the retention boundary) it fails with
 * EVENT_HISTORY_EXPIRED.
 */
export async function materialise(tx: Tx, s: SubscriptionRow, now: Date): Promise<number> {
  // Cheapest test first: nothing new in the log means nothing to count or scan.
  const { head, retentionBoundary } = await readStream(tx, s.namespace_id);
  if (BigInt(s.cursor_sequence) >= BigInt(head)) return 0;
  // Enough already waiting: materialise later, in one larger step. Counting the whole
  // backlog (up to max_pending rows) on every claim was most of a drain's database work
  // (measured: ~70 index rows read per delivery with max_pending 1000).
  if ((await countReady(tx, s.id, READY_LOW_WATER)) >= READY_LOW_WATER) return 0;
  const room = s.max_pending - (await countPending(tx, s.id));
  if (room <= 0) return 0;
  if (BigInt(s.cursor_sequence) < BigInt(retentionBoundary)) {
    throw new OrbitError("EVENT_HISTORY_EXPIRED", `events after ${s.cursor_sequence} up to ${retentionBoundary} were purged before delivery`);
  }
  const events = await selectMatchingEvents(tx, {
    namespaceId: s.namespace_id,
    queueId: s.queue_id,
    types: s.types.split(","),
    after: s.cursor_sequence,
    upTo: head,
    limit: room,
  });
  await insertDeliveries(tx, s.id, s.max_attempts, now, events.map((e) => ({ id: newId(), eventId: e.id, sequence: e.sequence })));
  // A full page may stop short of the head; otherwise everything up to the head is scanned.
  const cursor = events.length === room ? events.at(-1)!.sequence : head;
  await updateCursor(tx, s.id, cursor);
  return events.length;
}

export async function claim(pool: Pool, r: ClaimRequest, signal?: AbortSignal): Promise<ClaimOutcome> {
  // Counted only once the transaction committed (a retried attempt starts from zero).
  let counted = { created: 0, leased: 0, expired: 0 };
  const out = await withTransaction(
    pool,
    async (tx) => {
      counted = { created: 0, leased: 0, expired: 0 };
      const s = await selectSubscriptionForClaim(tx, r.subscriptionId);
      if (!s) throw new OrbitError("NOT_FOUND");
      if (r.credentialId !== undefined && (await credentialRevoked(tx, r.credentialId))) throw new OrbitError("UNAUTHENTICATED", "the credential was revoked");
      if (!s.enabled) return { leases: [], paused: true, held: await countHeld(tx, r.sessionId) };
      const now = nowMs();
      const recovered = await recoverExpiredLeases(tx, s.id, now);
      const created = await materialise(tx, s, now);
      counted.expired += recovered.expired;
      counted.created += created;
      const held = await countHeld(tx, r.sessionId);
      const free = Math.min(r.capacity - held, r.maxLeases ?? r.capacity);
      if (free <= 0) return { leases: [], paused: false, held };
      const ids = await selectClaimable(tx, s.id, now, free);
      if (ids.length === 0) return { leases: [], paused: false, held };
      const secrets = ids.map((id) => ({ id, secret: randomBytes(LEASE_SECRET_BYTES) }));
      const leaseUntil = new Date(now.getTime() + r.leaseDurationMs);
      const leased = await leaseDeliveries(tx, secrets.map((x) => ({ id: x.id, digest: secretDigest(x.secret) })), r.sessionId, leaseUntil);
      // The subscription lock makes every PENDING row ours to lease.
      if (leased !== ids.length) throw new Error("a claimable delivery changed under the subscription lock");
      counted.leased += leased;
      const bySecret = new Map(secrets.map((x) => [x.id, encodeBase64url(x.secret)]));
      const rows = await selectWithEvents(tx, ids);
      return {
        paused: false,
        held: held + ids.length,
        leases: rows.map((row) => ({ delivery: toWireDelivery(row), event: toWireEvent(row.ev), leaseSecret: bySecret.get(row.id)! })),
      };
    },
    signal,
    "READ COMMITTED",
  );
  metrics.deliveries.inc({ stage: "created" }, counted.created);
  metrics.deliveries.inc({ stage: "leased" }, counted.leased);
  metrics.deliveries.inc({ stage: "expired" }, counted.expired);
  return out;
}

export interface AckProof {
  readonly deliveryId: string;
  readonly epoch: string;
  /** The 32 secret bytes, already decoded from canonical base64url. */
  readonly secret: Buffer;
}

export type AckOutcome =
  | { readonly ok: true; readonly deliveryId: string; readonly eventId: string; readonly epoch: string; readonly acknowledgedAt: string; readonly deduplicated: boolean }
  | { readonly ok: false; readonly deliveryId: string; readonly code: "DELIVERY_LEASE_LOST" };

/**
 * ACKs proofs of one subscription in one transaction (spec §6): the first valid ACK sets
 * ACKED and acknowledged_at and writes one audit record; a replay of the same proof
 * returns the original acknowledged_at, deduplicated; a replaced, wrong or unknown proof
 * is DELIVERY_LEASE_LOST. No lease-expiry condition: the latest proof may ACK late, also
 * an EXPIRED delivery (decision 7), as long as no newer epoch replaced it.
 */
export async function ack(
  pool: Pool,
  who: { subscriptionId: string; namespaceId: string; credentialId: string },
  proofs: readonly AckProof[],
  signal?: AbortSignal,
): Promise<AckOutcome[]> {
  let acked = 0;
  const out = await withTransaction(
    pool,
    async (tx) => {
      const rows = new Map((await selectProofs(tx, who.subscriptionId, proofs.map((p) => p.deliveryId))).map((r) => [r.id, r]));
      const now = nowMs();
      const fresh: string[] = [];
      const outcomes: AckOutcome[] = proofs.map((p) => {
        const row = rows.get(p.deliveryId);
        const valid =
          row !== undefined &&
          row.lease_epoch === p.epoch &&
          row.lease_secret_digest !== null &&
          timingSafeEqual(Buffer.from(row.lease_secret_digest), secretDigest(p.secret));
        if (!valid) return { ok: false, deliveryId: p.deliveryId, code: "DELIVERY_LEASE_LOST" };
        if (row.state === "ACKED") {
          return { ok: true, deliveryId: row.id, eventId: row.event_id, epoch: row.lease_epoch, acknowledgedAt: formatTimestamp(row.acknowledged_at!), deduplicated: true };
        }
        // The same proof twice in one batch: the second is a replay of the first.
        if (fresh.includes(row.id)) {
          return { ok: true, deliveryId: row.id, eventId: row.event_id, epoch: row.lease_epoch, acknowledgedAt: formatTimestamp(now), deduplicated: true };
        }
        fresh.push(row.id);
        return { ok: true, deliveryId: row.id, eventId: row.event_id, epoch: row.lease_epoch, acknowledgedAt: formatTimestamp(now), deduplicated: false };
      });
      if (fresh.length > 0) {
        await markAcked(tx, fresh, now);
        acked = fresh.length;
        await insertAudits(
          tx,
          fresh.map((id) => {
            const row = rows.get(id)!;
            return {
              id: newId(),
              namespaceId: who.namespaceId,
              credentialId: who.credentialId,
              subscriptionId: who.subscriptionId,
              deliveryId: id,
              action: "delivery.ack" as const,
              details: { epoch: row.lease_epoch, state_before: row.state },
              revisionBefore: row.revision,
              revisionAfter: (BigInt(row.revision) + 1n).toString(),
              at: now,
            };
          }),
        );
      }
      return outcomes;
    },
    signal,
  );
  metrics.deliveries.inc({ stage: "acked" }, acked);
  return out;
}

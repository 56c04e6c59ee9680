// Acknowledgements (docs/protocol.md §6): the proofs of a lease checked and the
// deliveries marked ACKED, with their audit records, in the database, inside one
// transaction per batch, so that an ACK is durable before it is confirmed.
import { timingSafeEqual } from "node:crypto";
import { nowMs } from "../clock.js";
import type { Pool } from "../db/types.js";
import { commitWith, withTransaction } from "../db/tx.js";
import { markAckedStatement, selectProofs } from "../db/queries/deliveries.js";
import { auditsStatement } from "../db/queries/audit.js";
import { OrbitError } from "../wire/errors.js";
import { formatTimestamp } from "../wire/time.js";
import { secretDigest } from "./delivery-engine.js";
import { newId } from "./identity.js";
import * as metrics from "../metrics.js";

export interface AckProof {
  readonly deliveryId: string;
  readonly epoch: string;
  /** The 32 secret bytes, already decoded from canonical base64url. */
  readonly secret: Buffer;
}

export type AckOutcome =
  | {
      readonly ok: true;
      readonly deliveryId: string;
      readonly eventId: string;
      readonly epoch: string;
      readonly acknowledgedAt: string;
      readonly deduplicated: boolean;
    }
  | { readonly ok: false; readonly deliveryId: string; readonly code: "DELIVERY_LEASE_LOST" };

/**
 * ACKs proofs of one subscription in one transaction: the first valid ACK sets ACKED and
 * acknowledged_at and writes one audit record; a replay of the same proof returns the
 * original acknowledged_at, deduplicated; a replaced, wrong or unknown proof is
 * DELIVERY_LEASE_LOST. No lease-expiry condition: the latest proof may ACK late, also an
 * EXPIRED delivery (docs/protocol.md §6, a late ACK), as long as no newer epoch replaced
 * it. `pool` has ENGINE_SESSION: lock the proofs, then mark, audit and COMMIT — 2 round
 * trips.
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
      const found = await selectProofs(
        tx,
        who.subscriptionId,
        who.credentialId,
        proofs.map((p) => p.deliveryId),
      );
      // Revoked while connected: no ACK of it is taken (the connection closes, docs/protocol.md §7).
      if (found.revoked) throw new OrbitError("UNAUTHENTICATED", "the credential was revoked");
      const rows = new Map(found.proofs.map((r) => [r.id, r]));
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
          return {
            ok: true,
            deliveryId: row.id,
            eventId: row.event_id,
            epoch: row.lease_epoch,
            acknowledgedAt: formatTimestamp(row.acknowledged_at!),
            deduplicated: true,
          };
        }
        // The same proof twice in one batch: the second is a replay of the first.
        if (fresh.includes(row.id)) {
          return {
            ok: true,
            deliveryId: row.id,
            eventId: row.event_id,
            epoch: row.lease_epoch,
            acknowledgedAt: formatTimestamp(now),
            deduplicated: true,
          };
        }
        fresh.push(row.id);
        return {
          ok: true,
          deliveryId: row.id,
          eventId: row.event_id,
          epoch: row.lease_epoch,
          acknowledgedAt: formatTimestamp(now),
          deduplicated: false,
        };
      });
      if (fresh.length > 0) {
        acked = fresh.length;
        const audits = fresh.map((id) => {
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
        });
        // The ACKED marks, their audit records and COMMIT in one round trip.
        await commitWith(tx, [markAckedStatement(fresh, now), auditsStatement(audits)]);
      }
      return outcomes;
    },
    signal,
  );
  metrics.deliveries.inc({ stage: "acked" }, acked);
  return out;
}

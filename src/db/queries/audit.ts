// SQL for audit_records.
import type { Tx } from "../types.js";
import type { Statement } from "../tx.js";

export interface AuditRecord {
  readonly id: string;
  readonly namespaceId: string;
  readonly credentialId: string;
  readonly subscriptionId: string;
  readonly deliveryId?: string;
  readonly action: "subscription.configure" | "delivery.retry" | "delivery.ack";
  readonly details: Record<string, unknown>;
  readonly reason?: string;
  readonly revisionBefore: string;
  readonly revisionAfter: string;
  readonly at: Date;
}

export async function insertAudit(tx: Tx, a: AuditRecord): Promise<void> {
  const st = auditsStatement([a]);
  await tx.query(st.sql, [...st.params]);
}

/** Several records in one INSERT (a batch of ACKs writes one per delivery; at least one). */
export function auditsStatement(records: readonly AuditRecord[]): Statement {
  return {
    sql: `INSERT INTO audit_records (id, namespace_id, credential_id, subscription_id, delivery_id, action, details, reason,
                                revision_before, revision_after, created_at)
     VALUES ?`,
    params: [
      records.map((a) => [
        a.id,
        a.namespaceId,
        a.credentialId,
        a.subscriptionId,
        a.deliveryId ?? null,
        a.action,
        JSON.stringify(a.details),
        a.reason ?? null,
        a.revisionBefore,
        a.revisionAfter,
        a.at,
      ]),
    ],
  };
}

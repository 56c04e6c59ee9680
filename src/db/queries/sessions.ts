// SQL for event_sessions.
import type { Pool, Tx } from "../types.js";

export async function insertSession(
  db: Pool | Tx,
  s: { id: string; subscriptionId: string; credentialId: string; capacity: number; nodeId: string; now: Date },
): Promise<void> {
  await db.query(
    "INSERT INTO event_sessions (id, subscription_id, credential_id, capacity, node_id, opened_at) VALUES (?, ?, ?, ?, ?, ?)",
    [s.id, s.subscriptionId, s.credentialId, s.capacity, s.nodeId, s.now],
  );
}

export async function closeSession(db: Pool | Tx, id: string, now: Date): Promise<void> {
  await db.query("UPDATE event_sessions SET closed_at = ? WHERE id = ? AND closed_at IS NULL", [now, id]);
}

/** Namespace heads for a set of namespaces: the cheap poll for results committed elsewhere. */
export async function selectHeads(db: Pool, namespaceIds: readonly string[]): Promise<Map<string, string>> {
  if (namespaceIds.length === 0) return new Map();
  const [rows] = await db.query<import("mysql2/promise").RowDataPacket[]>(
    "SELECT namespace_id, head_sequence FROM namespace_streams WHERE namespace_id IN (?)",
    [namespaceIds],
  );
  return new Map(rows.map((r) => [r.namespace_id as string, String(r.head_sequence)]));
}

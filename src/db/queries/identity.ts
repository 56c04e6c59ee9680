// SQL for namespaces, applications, credentials and queues. Row types mirror the
// columns; mapping to wire shapes happens in domain/identity.ts.
import type { RowDataPacket } from "mysql2/promise";
import type { Pool, Tx } from "../types.js";
import type { Statement } from "../tx.js";

export interface CredentialRow {
  id: string;
  namespace_id: string;
  application_id: string;
  secret_digest: Buffer;
  actions: string;
  revoked_at: Date | null;
}

/**
 * Takes a credential id; returns the credential and its queue scope (by name) in one
 * round trip (every request authenticates: one query, not two). The queues are sorted
 * here, not by ORDER BY: that makes MariaDB build a temporary table and filesort on every
 * request (names are ASCII, compared by code unit like ascii_bin).
 */
export async function selectCredentialWithQueues(db: Pool | Tx, id: string): Promise<CredentialWithQueues | undefined> {
  return (await selectCredentialsWithQueues(db, [id])).get(id);
}

export type CredentialWithQueues = CredentialRow & { queues: QueueRow[] };

/** The same for several credentials in one statement (credential-lookups.ts), by id. */
export async function selectCredentialsWithQueues(
  db: Pool | Tx,
  ids: readonly string[],
): Promise<Map<string, CredentialWithQueues>> {
  const [rows] = await db.query<
    (CredentialRow & { queue_id: string | null; queue_name: string | null } & RowDataPacket)[]
  >(
    `SELECT c.id, c.namespace_id, c.application_id, c.secret_digest, c.actions, c.revoked_at,
            q.id AS queue_id, q.name AS queue_name
       FROM credentials c
       LEFT JOIN credential_queues cq ON cq.credential_id = c.id
       LEFT JOIN queues q ON q.id = cq.queue_id
      WHERE c.id IN (?)`,
    [ids],
  );
  const found = new Map<string, CredentialWithQueues>();
  for (const r of rows) {
    let c = found.get(r.id);
    if (!c) {
      c = {
        id: r.id,
        namespace_id: r.namespace_id,
        application_id: r.application_id,
        secret_digest: r.secret_digest,
        actions: r.actions,
        revoked_at: r.revoked_at,
        queues: [],
      };
      found.set(r.id, c);
    }
    if (r.queue_id !== null) c.queues.push({ id: r.queue_id, name: r.queue_name! });
  }
  for (const c of found.values()) c.queues.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return found;
}

export interface QueueRow {
  id: string;
  name: string;
}

/*
 * The three upserts below are INSERT IGNORE plus a LOCKING read of the row by name, and
 * must stay so. Bootstrap runs at REPEATABLE READ, where a plain SELECT reads the snapshot
 * of the transaction's first plain read (the namespace's); INSERT IGNORE instead checks the
 * latest committed rows. When a concurrent bootstrap commits the same application or queue
 * after our snapshot, the INSERT skips it as a duplicate and a plain SELECT does not see
 * it: no row. A locking read sees the latest committed row (as selectKey in idempotency.ts
 * does). Shared, not FOR UPDATE: INSERT IGNORE already holds a shared lock on a duplicate,
 * and concurrent runs reusing one row need not queue behind each other.
 */

/** The id of the one row an upsert's locking read found; a clear error, not a TypeError, if none. */
function upsertedId(rows: RowDataPacket[], what: string, name: string): string {
  const id = rows[0]?.id as string | undefined;
  // Only an INSERT IGNORE that failed for another reason than a duplicate (it turns
  // errors into warnings) leaves no row; not expected, but never a TypeError for users.
  if (id === undefined) throw new Error(`${what} "${name}" was neither created nor found`);
  return id;
}

/**
 * Takes a namespace name; inserts it unless it exists (a concurrent bootstrap may race
 * us: INSERT IGNORE plus a locking read makes both sides agree); returns its id.
 */
export async function upsertNamespace(tx: Tx, id: string, name: string): Promise<string> {
  await tx.query("INSERT IGNORE INTO namespaces (id, name, created_at) VALUES (?, ?, UTC_TIMESTAMP(3))", [id, name]);
  const [rows] = await tx.query<RowDataPacket[]>("SELECT id FROM namespaces WHERE name = ? LOCK IN SHARE MODE", [name]);
  return upsertedId(rows, "namespace", name);
}

/** Takes a namespace id and an application name; inserts unless it exists; returns its id. */
export async function upsertApplication(tx: Tx, id: string, namespaceId: string, name: string): Promise<string> {
  await tx.query(
    "INSERT IGNORE INTO applications (id, namespace_id, name, created_at) VALUES (?, ?, ?, UTC_TIMESTAMP(3))",
    [id, namespaceId, name],
  );
  const [rows] = await tx.query<RowDataPacket[]>(
    "SELECT id FROM applications WHERE namespace_id = ? AND name = ? LOCK IN SHARE MODE",
    [namespaceId, name],
  );
  return upsertedId(rows, "application", name);
}

/** Takes a namespace id and a queue name; inserts unless it exists; returns its id. */
export async function upsertQueue(tx: Tx, id: string, namespaceId: string, name: string): Promise<string> {
  await tx.query("INSERT IGNORE INTO queues (id, namespace_id, name, created_at) VALUES (?, ?, ?, UTC_TIMESTAMP(3))", [
    id,
    namespaceId,
    name,
  ]);
  const [rows] = await tx.query<RowDataPacket[]>(
    "SELECT id FROM queues WHERE namespace_id = ? AND name = ? LOCK IN SHARE MODE",
    [namespaceId, name],
  );
  return upsertedId(rows, "queue", name);
}

/** Inserts a credential with its actions (a SET column: comma-joined) and queue scope. */
export async function insertCredential(
  tx: Tx,
  c: { id: string; namespaceId: string; applicationId: string; digest: Buffer; actions: readonly string[] },
  queueIds: readonly string[],
): Promise<void> {
  await tx.query(
    `INSERT INTO credentials (id, namespace_id, application_id, secret_digest, actions, created_at)
     VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(3))`,
    [c.id, c.namespaceId, c.applicationId, c.digest, c.actions.join(",")],
  );
  for (const q of queueIds) {
    await tx.query("INSERT INTO credential_queues (credential_id, queue_id) VALUES (?, ?)", [c.id, q]);
  }
}

/** Marks a credential revoked; returns whether it existed and was not revoked yet. */
export async function revokeCredential(db: Pool | Tx, id: string): Promise<boolean> {
  const [res] = await db.query<import("mysql2/promise").ResultSetHeader>(
    "UPDATE credentials SET revoked_at = UTC_TIMESTAMP(3) WHERE id = ? AND revoked_at IS NULL",
    [id],
  );
  return res.affectedRows === 1;
}

/** Creates the namespace's result stream (head 0, nothing purged) unless it exists. */
export async function ensureStream(tx: Tx, namespaceId: string): Promise<void> {
  await tx.query(
    `INSERT IGNORE INTO namespace_streams (namespace_id, head_sequence, retention_boundary, updated_at)
     VALUES (?, 0, 0, UTC_TIMESTAMP(3))`,
    [namespaceId],
  );
}

/** Takes a namespace name; returns its id. */
export async function selectNamespaceId(db: Pool | Tx, name: string): Promise<string | undefined> {
  const [rows] = await db.query<RowDataPacket[]>("SELECT id FROM namespaces WHERE name = ?", [name]);
  return rows[0]?.id as string | undefined;
}

/** A credential's revocation, to send with other statements (revokedIn reads its result). */
export function credentialRevocationStatement(id: string): Statement {
  return activeCredentialsStatement([id]);
}

/** credentialRevocationStatement's result: true when the credential is revoked (or gone). */
export function revokedIn(rows: RowDataPacket[]): boolean {
  return rows.length === 0;
}

/**
 * Which of these credentials are active (not revoked) now: a worker's calls send it with
 * their batch's first statements (worker.ts endAttemptCalls). A plain read at READ
 * COMMITTED sees every revocation committed before it; revoked_at only ever goes from
 * NULL to a time, so nothing needs locking.
 */
export function activeCredentialsStatement(ids: readonly string[]): Statement {
  return { sql: "SELECT id FROM credentials WHERE id IN (?) AND revoked_at IS NULL", params: [ids] };
}

/** activeCredentialsStatement's result: the active credentials' ids. */
export function activeIn(rows: RowDataPacket[]): Set<string> {
  return new Set(rows.map((r) => r.id as string));
}

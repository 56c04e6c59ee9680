// SQL for subscriptions.
import type { RowDataPacket } from "mysql2/promise";
import type { Pool, Tx } from "../types.js";
import { queryAll, type Statement } from "../tx.js";

export interface SubscriptionRow {
  id: string;
  namespace_id: string;
  application_id: string;
  credential_id: string;
  queue_id: string;
  name: string;
  revision: string;
  enabled: number;
  types: string;
  cursor_sequence: string;
  max_pending: number;
  max_attempts: number;
  created_at: Date;
  updated_at: Date;
  /** Counted from deliveries: PENDING + LEASED + EXPIRED. */
  pending_count: number;
}

/**
 * pending_count is three counts, one a state, each a key prefix (subscription_id, state) of
 * deliveries_state: the backlog alone (at most max_pending rows). Counted with `state IN
 * (…)` for a page of subscriptions, where s.id is no constant, the optimizer reads
 * deliveries_state by subscription_id alone — every delivery the subscription ever had,
 * ACKED ones included, which are kept.
 */
const pendingIn = (state: string) =>
  `(SELECT COUNT(*) FROM deliveries d FORCE INDEX (deliveries_state) WHERE d.subscription_id = s.id AND d.state = '${state}')`;

const COLUMNS = `s.id, s.namespace_id, s.application_id, s.credential_id, s.queue_id, s.name, s.revision, s.enabled,
  s.types, s.cursor_sequence, s.max_pending, s.max_attempts, s.created_at, s.updated_at,
  ${pendingIn("PENDING")} + ${pendingIn("LEASED")} + ${pendingIn("EXPIRED")} AS pending_count`;

export async function selectSubscription(
  db: Pool | Tx,
  id: string,
  lock = false,
): Promise<SubscriptionRow | undefined> {
  const [rows] = await db.query<(SubscriptionRow & RowDataPacket)[]>(
    `SELECT ${COLUMNS} FROM subscriptions s WHERE s.id = ?${lock ? " FOR UPDATE" : ""}`,
    [id],
  );
  return rows[0] ? { ...rows[0], pending_count: Number(rows[0].pending_count) } : undefined;
}

/** What a claim decides from, read in the same round trip as the subscription's lock. */
export interface ClaimStateRow extends SubscriptionRow {
  /** The owning credential was revoked (or is gone): its connections may not claim. */
  credential_revoked: number;
  /** The committed head and the retention boundary of the namespace's log. */
  head_sequence: string;
  retention_boundary: string;
  /** Some LEASED delivery's lease ran out: recovery has work to do. */
  lease_expired: number;
  /**
   * PENDING + LEASED + EXPIRED (what max_pending bounds), counted only when the claim
   * should materialise — the log has news and fewer than `readyUpTo` are PENDING —
   * else null. Counting the whole backlog on every claim would be most of a drain's
   * database work.
   */
  backlog: number | null;
  /**
   * "session:count,…" — LEASED deliveries whose lease has not run out, held by each of the
   * sessions asked about that holds any. A lease that ran out is not counted: the claim
   * recovers it (lease_expired) before it leases, so it is no longer held when the claim
   * decides each connection's room (protocol §5 capacity: what the connection may hold).
   */
  held: string | null;
}

/**
 * The claim's lock on a subscription, with everything else a claim needs to decide what
 * to do, in one round trip. The subqueries are
 * plain reads, not locks — a locking clause does not reach into subqueries — so claims
 * never wait on the sequencer's lock of the stream row. Under the claim's READ COMMITTED
 * they read what was committed when the lock was granted: tried on MariaDB 10.11, a row
 * committed while the statement waited for the lock is counted, by correlated and
 * uncorrelated subqueries alike (max_pending and capacity depend on it).
 */
export function claimStateStatement(
  id: string,
  q: { now: Date; readyUpTo: number; sessionIds: readonly string[] },
): Statement {
  // The @orbit_* session variables carry the locked row's values to the statements after
  // it in the same round trip (materialiseStatements): each is assigned once, from its
  // own expression. (MySQL 8 warns that assignments in SELECT are deprecated; MariaDB
  // does not.) Each subquery of deliveries names its index: the optimizer otherwise
  // estimates every index on (subscription_id, state, …) — 5 of them — for each one, on
  // every claim, which costs more than the count itself.
  return {
    sql: `SELECT s.id, @orbit_namespace := s.namespace_id AS namespace_id, s.application_id, s.credential_id,
            @orbit_queue := s.queue_id AS queue_id, s.name, s.revision, @orbit_enabled := s.enabled AS enabled,
            @orbit_types := s.types AS types, @orbit_cursor := s.cursor_sequence AS cursor_sequence,
            @orbit_max_pending := s.max_pending AS max_pending, @orbit_budget := s.max_attempts AS max_attempts,
            s.created_at, s.updated_at, 0 AS pending_count,
            COALESCE((SELECT c.revoked_at IS NOT NULL FROM credentials c WHERE c.id = s.credential_id), 1) AS credential_revoked,
            @orbit_head := COALESCE((SELECT n.head_sequence FROM namespace_streams n WHERE n.namespace_id = s.namespace_id), 0) AS head_sequence,
            @orbit_boundary := COALESCE((SELECT n.retention_boundary FROM namespace_streams n WHERE n.namespace_id = s.namespace_id), 0) AS retention_boundary,
            EXISTS (SELECT 1 FROM deliveries d FORCE INDEX (deliveries_state) WHERE d.subscription_id = s.id AND d.state = 'LEASED' AND d.lease_until < ?) AS lease_expired,
            @orbit_backlog := CASE WHEN s.cursor_sequence < (SELECT n.head_sequence FROM namespace_streams n WHERE n.namespace_id = s.namespace_id)
                  AND (SELECT COUNT(*) FROM (SELECT 1 FROM deliveries r FORCE INDEX (deliveries_state) WHERE r.subscription_id = ? AND r.state = 'PENDING' LIMIT ?) ready) < ?
                 THEN (SELECT COUNT(*) FROM deliveries b FORCE INDEX (deliveries_state) WHERE b.subscription_id = s.id AND b.state IN ('PENDING', 'LEASED', 'EXPIRED'))
            END AS backlog,
            (SELECT GROUP_CONCAT(h.session_id, ':', h.n) FROM
              (SELECT e.session_id, COUNT(*) AS n FROM deliveries e FORCE INDEX (deliveries_state)
                WHERE e.subscription_id = ? AND e.state = 'LEASED' AND e.lease_until >= ? AND e.session_id IN (?) GROUP BY e.session_id) h) AS held
       FROM subscriptions s WHERE s.id = ? FOR UPDATE`,
    params: [q.now, id, q.readyUpTo, q.readyUpTo, id, q.now, q.sessionIds, id],
  };
}

/** Before claimStateStatement: a subscription that is gone must leave no @orbit_* values of an earlier claim behind. */
export const resetClaimState: Statement = { sql: "SET @orbit_backlog = NULL", params: [] };

/** The claim state statement's result: the row, or undefined for an unknown subscription. */
export function toClaimState(rows: unknown): ClaimStateRow | undefined {
  const r = (rows as ClaimStateRow[])[0];
  return (
    r && {
      ...r,
      head_sequence: String(r.head_sequence),
      retention_boundary: String(r.retention_boundary),
      backlog: r.backlog === null ? null : Number(r.backlog),
    }
  );
}

/** Takes an owner, a queue and a page position; returns up to limit rows, newest first. */
export async function selectSubscriptionPage(
  db: Pool,
  credentialId: string,
  queueId: string,
  after: { createdAt: Date; id: string } | undefined,
  limit: number,
): Promise<SubscriptionRow[]> {
  const [rows] = await db.query<(SubscriptionRow & RowDataPacket)[]>(
    `SELECT ${COLUMNS} FROM subscriptions s
      WHERE s.credential_id = ? AND s.queue_id = ?
        ${after ? "AND (s.created_at < ? OR (s.created_at = ? AND s.id < ?))" : ""}
      ORDER BY s.created_at DESC, s.id DESC LIMIT ?`,
    after ? [credentialId, queueId, after.createdAt, after.createdAt, after.id, limit] : [credentialId, queueId, limit],
  );
  return rows.map((r) => ({ ...r, pending_count: Number(r.pending_count) }));
}

/**
 * Locks the namespace row and counts its subscriptions: two concurrent creates in one
 * namespace take turns here, so the 64 limit holds without a race.
 */
export async function lockNamespaceAndCount(tx: Tx, namespaceId: string): Promise<number> {
  await tx.query("SELECT id FROM namespaces WHERE id = ? FOR UPDATE", [namespaceId]);
  // A locking read: it sees every create committed before we got the lock.
  const [rows] = await tx.query<RowDataPacket[]>(
    "SELECT COUNT(*) AS n FROM subscriptions WHERE namespace_id = ? LOCK IN SHARE MODE",
    [namespaceId],
  );
  return Number(rows[0]!.n);
}

/**
 * A purge's hold on the namespace (domain/result-log.ts purge): its row — creates of
 * subscriptions take turns with it (lockNamespaceAndCount), so a new one starts from the
 * boundary as it is after the purge — and every subscription's row, so a claim in flight
 * finishes first and every later one reads the new boundary before it materialises (a
 * claim that read the old one could otherwise materialise after the events were deleted,
 * missing them, and move its cursor past them).
 */
export async function lockNamespaceForPurge(tx: Tx, namespaceId: string): Promise<void> {
  await tx.query("SELECT id FROM namespaces WHERE id = ? FOR UPDATE", [namespaceId]);
  await tx.query("SELECT id FROM subscriptions WHERE namespace_id = ? FOR UPDATE", [namespaceId]);
}

/**
 * Before a purge up to `boundary`: a subscription whose cursor is below it but none of whose
 * events (its queue, its types) lie between the cursor and the boundary loses nothing to
 * the purge — its cursor moves to the boundary, as materialising that stretch would have
 * moved it (nothing to create). The others keep their cursors: their claims report the
 * gap (EVENT_HISTORY_EXPIRED). Without this, a purge of other queues' events (or a
 * retention sweep, while a subscription has no consumer) would close every lagging
 * subscription of the namespace for good. Returns how many moved.
 *
 * One check per lagging subscription (at most 64 in a namespace), all in one round trip,
 * each a range of result_events_queue from the cursor to the boundary. Correlated with the
 * subscription row in one UPDATE, the check could not use the cursor as a bound: it would
 * read (namespace_id, queue_id) from the queue's first retained event up to the cursor —
 * under the namespace's and every subscription's lock, so the namespace's claims would
 * wait that long.
 */
export async function advanceCursorsPastPurge(tx: Tx, namespaceId: string, boundary: string): Promise<number> {
  const [lagging] = await tx.query<RowDataPacket[]>(
    "SELECT id, queue_id, cursor_sequence, types FROM subscriptions WHERE namespace_id = ? AND cursor_sequence < ?",
    [namespaceId, boundary],
  );
  if (lagging.length === 0) return 0;
  const found = (await queryAll(
    tx,
    lagging.map((s) => eventsBetweenStatement(namespaceId, s.queue_id, String(s.cursor_sequence), boundary, s.types)),
  )) as RowDataPacket[][];
  const moving = lagging.filter((_, i) => found[i]!.length === 0).map((s) => s.id as string);
  if (moving.length === 0) return 0;
  const [res] = await tx.query<import("mysql2/promise").ResultSetHeader>(
    "UPDATE subscriptions SET cursor_sequence = ? WHERE id IN (?) AND cursor_sequence < ?",
    [boundary, moving, boundary],
  );
  return res.affectedRows;
}

/** One row when a subscription's queue has an event of its types in (after, upTo]: a range of result_events_queue, stopping at the first. */
export function eventsBetweenStatement(
  namespaceId: string,
  queueId: string,
  after: string,
  upTo: string,
  types: string,
): Statement {
  return {
    sql: `SELECT 1 FROM result_events FORCE INDEX (result_events_queue)
           WHERE namespace_id = ? AND queue_id = ? AND sequence > ? AND sequence <= ? AND FIND_IN_SET(type, ?)
           LIMIT 1`,
    params: [namespaceId, queueId, after, upTo, types],
  };
}

export async function nameTaken(tx: Tx, namespaceId: string, name: string): Promise<boolean> {
  const [rows] = await tx.query<RowDataPacket[]>("SELECT 1 FROM subscriptions WHERE namespace_id = ? AND name = ?", [
    namespaceId,
    name,
  ]);
  return rows.length > 0;
}

export async function insertSubscription(
  tx: Tx,
  s: Omit<SubscriptionRow, "revision" | "enabled" | "updated_at" | "pending_count">,
): Promise<void> {
  await tx.query(
    `INSERT INTO subscriptions (id, namespace_id, application_id, credential_id, queue_id, name, revision, enabled, types,
                                cursor_sequence, max_pending, max_attempts, created_at, updated_at)
     VALUES (?, ?, ?, ?, ?, ?, 1, TRUE, ?, ?, ?, ?, ?, ?)`,
    [
      s.id,
      s.namespace_id,
      s.application_id,
      s.credential_id,
      s.queue_id,
      s.name,
      s.types,
      s.cursor_sequence,
      s.max_pending,
      s.max_attempts,
      s.created_at,
      s.created_at,
    ],
  );
}

/** Sets enabled and bumps the configuration revision, guarded by the expected revision. */
export async function updateEnabled(
  tx: Tx,
  id: string,
  expectedRevision: string,
  enabled: boolean,
  now: Date,
): Promise<boolean> {
  const [res] = await tx.query<import("mysql2/promise").ResultSetHeader>(
    "UPDATE subscriptions SET enabled = ?, revision = revision + 1, updated_at = ? WHERE id = ? AND revision = ?",
    [enabled, now, id, expectedRevision],
  );
  return res.affectedRows === 1;
}

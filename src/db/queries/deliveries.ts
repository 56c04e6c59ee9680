// SQL for deliveries. The rules that use them are in domain/deliveries.ts (management)
// and domain/delivery-engine.ts (materialise, claim, ACK).
import type { ResultSetHeader, RowDataPacket } from "mysql2/promise";
import type { Pool, Tx } from "../types.js";
import type { WireEventRow } from "./result-log.js";
import { queryAll, type Statement } from "../tx.js";
import { rowIdPrefix } from "../../wire/ids.js";
import { credentialRevocationStatement, revokedIn } from "./identity.js";

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
export async function selectDelivery(
  db: Pool | Tx,
  subscriptionId: string,
  id: string,
  lock = false,
): Promise<DeliveryRow | undefined> {
  const [rows] = await db.query<(DeliveryRow & RowDataPacket)[]>(
    `SELECT ${DELIVERY_COLUMNS} FROM deliveries WHERE id = ? AND subscription_id = ?${lock ? " FOR UPDATE" : ""}`,
    [id, subscriptionId],
  );
  return rows[0];
}

/**
 * Takes a subscription, an optional state and a page position; newest first by creation,
 * then id. The index is named, so that no page scans a subscription's whole history for a
 * few rows: without a state, or for ACKED, deliveries_listing (subscription_id,
 * created_at, id) in page order — nearly every delivery is ACKED, and what is not is the
 * backlog, at most max_pending (1–1000) rows to pass over; for PENDING, LEASED or EXPIRED,
 * deliveries_state (subscription_id, state, …) — those rows are the backlog, at most
 * 1000, sorted for the page (migrations/000016: no index of its own per state).
 */
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
  const index = state === undefined || state === "ACKED" ? "deliveries_listing" : "deliveries_state";
  const [rows] = await db.query<(DeliveryRow & RowDataPacket)[]>(
    `SELECT ${DELIVERY_COLUMNS} FROM deliveries FORCE INDEX (${index}) WHERE ${where.join(" AND ")} ORDER BY created_at DESC, id DESC LIMIT ?`,
    [...params, limit],
  );
  return rows;
}

/**
 * Manual retry (docs/protocol.md §4): EXPIRED → PENDING with more budget, available now; attempts,
 * epoch and identity stay. Guarded by state and revision.
 */
export async function retryDelivery(
  tx: Tx,
  id: string,
  expectedRevision: string,
  additional: number,
  now: Date,
): Promise<boolean> {
  const [res] = await tx.query<ResultSetHeader>(
    `UPDATE deliveries SET state = 'PENDING', attempt_budget = attempt_budget + ?, available_at = ?, lease_until = NULL, revision = revision + 1
      WHERE id = ? AND revision = ? AND state = 'EXPIRED'`,
    [additional, now, id, expectedRevision],
  );
  return res.affectedRows === 1;
}

// ---- the delivery engine's statements (domain/delivery-engine.ts) ----

/**
 * Recovery (docs/protocol.md §4): LEASED deliveries of the subscription whose lease ran out go back
 * to PENDING within their attempt budget, else to EXPIRED. Their epoch stays, so the
 * latest proof can still ACK until a new claim replaces it. Two statements, so that the
 * node can count what expired (the first one's affected rows).
 */
export function recoveryStatements(subscriptionId: string, now: Date): Statement[] {
  return [
    {
      sql: `UPDATE deliveries SET state = 'EXPIRED', lease_until = NULL, session_id = NULL, revision = revision + 1
             WHERE subscription_id = ? AND state = 'LEASED' AND lease_until < ? AND attempts >= attempt_budget`,
      params: [subscriptionId, now],
    },
    {
      sql: `UPDATE deliveries SET state = 'PENDING', available_at = ?, lease_until = NULL, session_id = NULL, revision = revision + 1
             WHERE subscription_id = ? AND state = 'LEASED' AND lease_until < ?`,
      params: [now, subscriptionId, now],
    },
  ];
}

/** The most a subscription's backlog may hold (max_pending is 1–1000). */
const MAX_PENDING_LIMIT = 1000;

/**
 * Whether to materialise, from the claim state statement's variables: it counted the
 * backlog (news in the log, few ready), and there is room, history and no pause.
 */
const MATERIALISE = `@orbit_backlog IS NOT NULL AND @orbit_enabled AND @orbit_cursor >= @orbit_boundary
                     AND @orbit_max_pending > @orbit_backlog`;

/**
 * Materialising, in the claim's first round trip: right after claimStateStatement, which
 * locked the subscription and left its values in @orbit_* session variables
 * (resetClaimState before it: a missing row leaves nothing from an earlier claim).
 *
 * 1. PENDING deliveries (revision 1, epoch 0, no attempts yet, a fresh id each, time first
 *    as wire/ids.ts newRowId makes them) for the next matching events after the cursor up
 *    to the committed head, at most the room max_pending leaves, in sequence order.
 *    Nothing when the claim state says not to — no news, enough ready, paused, or
 *    purged history (the caller then fails with EVENT_HISTORY_EXPIRED): the range's
 *    upper bound is then 0, so no row is read. Under READ COMMITTED the SELECT part is a
 *    consistent read: it locks no result_events rows.
 * 2. The cursor moves to the head when the page was not full, else to the newest
 *    materialised delivery's sequence — never past an event not materialised (ROW_COUNT()
 *    of the INSERT just before). A full page inserted at least one row, and every earlier
 *    delivery has a sequence at most the old cursor: the newest is the subscription's
 *    newest PENDING one, one index lookup (the newest of all its deliveries would read them all).
 *
 * The range bounds are session variables, constants to the optimizer: the scan stops at
 * the LIMIT (a join to the subscription row instead would read the whole range and sort it).
 */
export function materialiseStatements(subscriptionId: string, now: Date): Statement[] {
  return [
    {
      sql: `INSERT INTO deliveries (id, subscription_id, event_id, sequence, revision, state, created_at, available_at,
                               lease_epoch, attempts, attempt_budget)
       SELECT CONCAT(?, LOWER(HEX(RANDOM_BYTES(10)))), ?, x.id, x.sequence, 1, 'PENDING', ?, ?, 0, 0, @orbit_budget
         FROM (SELECT y.id, y.sequence, ROW_NUMBER() OVER (ORDER BY y.sequence) AS rn
                 FROM (SELECT e.id, e.sequence FROM result_events e
                        WHERE e.namespace_id = @orbit_namespace AND e.queue_id = @orbit_queue
                          AND e.sequence > @orbit_cursor AND e.sequence <= IF(${MATERIALISE}, @orbit_head, 0)
                          AND FIND_IN_SET(e.type, @orbit_types)
                        ORDER BY e.sequence LIMIT ${MAX_PENDING_LIMIT}) y) x
        WHERE x.rn <= @orbit_max_pending - @orbit_backlog`,
      params: [rowIdPrefix(now.getTime()), subscriptionId, now, now],
    },
    {
      sql: `UPDATE subscriptions
               SET cursor_sequence = IF(ROW_COUNT() < @orbit_max_pending - @orbit_backlog, @orbit_head,
                                        (SELECT MAX(sequence) FROM deliveries FORCE INDEX (deliveries_state)
                                          WHERE subscription_id = ? AND state = 'PENDING' AND lease_until IS NULL))
             WHERE id = ? AND ${MATERIALISE}`,
      params: [subscriptionId, subscriptionId],
    },
  ];
}

/**
 * What a claim reads of a claimable delivery: only what the lease and its frame use. The
 * rest is known without reading it — the subscription (the claim's), the state (PENDING,
 * so no lease_until and no acknowledged_at), the event's id and sequence (the delivery's
 * event_id and sequence) — 15 columns instead of 23 parsed per row.
 */
export type ClaimableRow = Pick<
  DeliveryRow,
  | "id"
  | "event_id"
  | "sequence"
  | "revision"
  | "created_at"
  | "available_at"
  | "lease_epoch"
  | "attempts"
  | "attempt_budget"
> & {
  ev: WireEventRow;
};

/**
 * The oldest claimable deliveries — PENDING, in sequence order — with the event each
 * carries. Not compared with available_at: every writer sets it to its own now (materialise,
 * recovery, retry; there is no backoff), so against the claiming node's clock it would only
 * hold back, by the skew, rows a node whose clock runs ahead wrote — and a claim that
 * found nothing would leave them until the connection's next trigger (up to 30 s). A
 * plain read: the subscription's lock keeps other claims off these rows; the one writer
 * that can still reach a PENDING row (a late ACK with the latest proof of a recovered
 * lease) is caught by the lease UPDATE's guard. `lease_until IS
 * NULL` is true of every PENDING row; it makes the read one key prefix of
 * deliveries_state, whose next part is the sequence: index order, no sort (migrations/000018).
 */
export function claimableStatement(subscriptionId: string, limit: number): Statement {
  return {
    sql: `SELECT d.id, d.event_id, d.sequence, d.revision, d.created_at, d.available_at, d.lease_epoch, d.attempts, d.attempt_budget,
            e.type AS e_type, e.aggregate_id AS e_aggregate_id, e.aggregate_revision AS e_aggregate_revision,
            e.occurred_at AS e_occurred_at, e.details AS e_details, e.snapshot AS e_snapshot
       FROM deliveries d FORCE INDEX (deliveries_state) JOIN result_events e ON e.id = d.event_id
      WHERE d.subscription_id = ? AND d.state = 'PENDING' AND d.lease_until IS NULL
      ORDER BY d.sequence LIMIT ?`,
    params: [subscriptionId, limit],
  };
}

export function toClaimable(rows: unknown): ClaimableRow[] {
  return (rows as RowDataPacket[]).map((r) => ({
    id: r.id,
    event_id: r.event_id,
    sequence: r.sequence,
    revision: r.revision,
    created_at: r.created_at,
    available_at: r.available_at,
    lease_epoch: r.lease_epoch,
    attempts: r.attempts,
    attempt_budget: r.attempt_budget,
    ev: {
      id: r.event_id,
      sequence: r.sequence,
      type: r.e_type,
      aggregate_id: r.e_aggregate_id,
      aggregate_revision: String(r.e_aggregate_revision),
      occurred_at: r.e_occurred_at,
      details: r.e_details,
      snapshot: r.e_snapshot,
    },
  }));
}

/**
 * Leases deliveries to sessions: epoch + 1, attempts + 1, a new secret digest and the
 * holding session each, guarded by state so that a row someone else took is left alone.
 */
export function leaseStatement(
  leases: readonly { id: string; digest: Buffer; sessionId: string }[],
  leaseUntil: Date,
): Statement {
  const cases = leases.map(() => "WHEN ? THEN ?").join(" ");
  return {
    sql: `UPDATE deliveries
        SET state = 'LEASED', lease_epoch = lease_epoch + 1, attempts = attempts + 1, lease_until = ?,
            lease_secret_digest = CASE id ${cases} END, session_id = CASE id ${cases} END, revision = revision + 1
      WHERE id IN (?) AND state = 'PENDING'`,
    params: [
      leaseUntil,
      ...leases.flatMap((l) => [l.id, l.digest]),
      ...leases.flatMap((l) => [l.id, l.sessionId]),
      leases.map((l) => l.id),
    ],
  };
}

/** After a lease that matched fewer rows than asked (a late ACK won a row): which ones did it lease? */
export async function selectLeasedTo(
  tx: Tx,
  ids: readonly string[],
  sessionIds: readonly string[],
  leaseUntil: Date,
): Promise<Set<string>> {
  // Its own COMMIT: on the claim pool (autocommit off) the read would otherwise leave a
  // transaction open on the connection.
  const [rows] = await queryAll(tx, [
    {
      sql: "SELECT id FROM deliveries WHERE id IN (?) AND state = 'LEASED' AND session_id IN (?) AND lease_until = ?",
      params: [ids, sessionIds, leaseUntil],
    },
    { sql: "COMMIT", params: [] },
  ]);
  return new Set((rows as RowDataPacket[]).map((r) => r.id as string));
}

export const SESSION_LEASES_SQL =
  "SELECT id FROM deliveries FORCE INDEX (deliveries_state) WHERE subscription_id = ? AND state = 'LEASED' AND session_id = ?";

/**
 * The deliveries LEASED to an event session of the subscription. A ping reads them to learn
 * of ACKs taken on another node's connection. Like the claim's held count, from the
 * subscription's LEASED entries of deliveries_state (at most max_pending), reading the index
 * alone: no index starts with session_id.
 */
export async function selectSessionLeases(pool: Pool, subscriptionId: string, sessionId: string): Promise<Set<string>> {
  const [rows] = await pool.query<RowDataPacket[]>(SESSION_LEASES_SQL, [subscriptionId, sessionId]);
  return new Set(rows.map((r) => r.id as string));
}

/**
 * Takes a subscription; whether any of its deliveries is LEASED — a lease that may still
 * be ACKed, or re-sent once it runs out. Read only by a claim that found a history gap
 * and nothing to lease (domain/delivery-engine.ts historyGap): a key prefix of
 * deliveries_state, stopping at the first row.
 */
export async function anyLeased(tx: Tx, subscriptionId: string): Promise<boolean> {
  const [rows] = await tx.query<RowDataPacket[]>(
    "SELECT 1 FROM deliveries FORCE INDEX (deliveries_state) WHERE subscription_id = ? AND state = 'LEASED' LIMIT 1",
    [subscriptionId],
  );
  return rows.length > 0;
}

export interface ProofRow {
  id: string;
  subscription_id: string;
  event_id: string;
  state: DeliveryState;
  lease_epoch: string;
  lease_secret_digest: Buffer | null;
  acknowledged_at: Date | null;
  revision: string;
}

/**
 * Takes delivery ids of one subscription and the credential that ACKs them; returns what
 * an ACK checks, the proofs locked, and whether the credential is revoked (or gone) — an
 * open connection's ACKs check it too, in the same round trip.
 */
export async function selectProofs(
  tx: Tx,
  subscriptionId: string,
  credentialId: string,
  ids: readonly string[],
): Promise<{ revoked: boolean; proofs: ProofRow[] }> {
  const [credential, proofs] = (await queryAll(tx, [
    credentialRevocationStatement(credentialId),
    {
      sql: `SELECT id, subscription_id, event_id, state, lease_epoch, lease_secret_digest, acknowledged_at, revision
              FROM deliveries WHERE subscription_id = ? AND id IN (?) FOR UPDATE`,
      params: [subscriptionId, ids],
    },
  ])) as [RowDataPacket[], ProofRow[]];
  return { revoked: revokedIn(credential), proofs };
}

/** The first valid ACK: ACKED with acknowledged_at; the digest stays for replays. */
export function markAckedStatement(ids: readonly string[], now: Date): Statement {
  return {
    sql: `UPDATE deliveries SET state = 'ACKED', acknowledged_at = ?, lease_until = NULL, session_id = NULL, revision = revision + 1
      WHERE id IN (?) AND state <> 'ACKED'`,
    params: [now, ids],
  };
}

// The delivery engine (docs/protocol.md §4-6): materialise deliveries from the result log,
// lease them to connections and recover expired leases; ACKs are taken in
// delivery-acks.ts. Every decision is made in the database, inside one transaction, so
// several nodes consuming one subscription agree (docs/protocol.md §5: whether a delivery
// may be leased, and to whom, is decided in the database, never in a node's memory).
//
// One claim is one READ COMMITTED transaction for the waiting connections of one
// subscription on this node; claimIn runs its phases in order:
//   lockAndRead   — round trip 1: lock the subscription row (claims of one subscription
//                   take turns, across nodes), reading in the same statement the
//                   credential's revocation, the log head and whether any lease ran out;
//                   materialise from cursor_sequence up to the committed head while
//                   pending_count < max_pending (unless the hint says there is nothing
//                   to); read the oldest claimable rows
//   catchUp       — round trip 2, only when needed: the materialising the first one left
//                   out, recovery of expired leases (PENDING within budget, else
//                   EXPIRED), and the claimable rows again
//   assignLeases  — per connection, up to capacity − held and its free write slots
//   commitLeases  — last round trip: the lease (epoch+1, attempts+1, lease_until, new
//                   secret digest) together with COMMIT
// and only after COMMIT does the caller send event.deliver: the lease is durable first.
// READ COMMITTED keeps the recovery scan from gap-locking LEASED rows that concurrent
// ACKs are updating; the subscription row lock is what serialises claims.
//
// ENGINE_SESSION (autocommit off, several statements per round trip) makes a claim 2
// round trips (3 with catchUp) for up to 16 connections × 8 deliveries.
import { createHash, randomBytes } from "node:crypto";
import type { ResultSetHeader } from "mysql2/promise";
import type { Pool, Tx } from "../db/types.js";
import type { SessionMode } from "../db/pool.js";
import { commitWith, queryAll, withTransaction } from "../db/tx.js";
import {
  anyLeased,
  claimableStatement,
  leaseStatement,
  materialiseStatements,
  recoveryStatements,
  selectLeasedTo,
  toClaimable,
  type ClaimableRow,
} from "../db/queries/deliveries.js";
import { claimStateStatement, resetClaimState, toClaimState, type ClaimStateRow } from "../db/queries/subscriptions.js";
import { OrbitError } from "../wire/errors.js";
import { encodeBase64url } from "../wire/base64url.js";
import { formatTimestamp } from "../wire/time.js";
import { toWireEventJson } from "./result-log.js";
import type { DeliveryWire } from "./deliveries.js";
import { nowMs } from "../clock.js";
import * as metrics from "../metrics.js";

const LEASE_SECRET_BYTES = 32;
/**
 * Materialise when fewer PENDING deliveries than this are ready: two full claims (4
 * connections × 8). Above this mark a claim does not count the backlog and does not
 * materialise, since counting it on every claim would be most of a drain's database work.
 */
const READY_LOW_WATER = 64;

/**
 * Subscriptions whose last claim on this node had nothing to materialise (no news in the
 * log, or at least READY_LOW_WATER ready): their next claim leaves the two materialising
 * statements out of its first round trip — as no-ops they still cost time on every claim
 * of a drain, where only the occasional one refills — and sends them in a round trip of
 * their own only when its state says there may be something to do. A hint about cost,
 * never a decision: the claim's state decides, in the database. Bounded: cleared when it
 * holds HINTS_MAX subscriptions.
 */
const nothingToMaterialise = new Set<string>();
const HINTS_MAX = 10_000;

function hint(subscriptionId: string, nothing: boolean): void {
  if (!nothing) {
    nothingToMaterialise.delete(subscriptionId);
    return;
  }
  if (nothingToMaterialise.size >= HINTS_MAX) nothingToMaterialise.clear();
  nothingToMaterialise.add(subscriptionId);
}

/**
 * The session the engine's pools need (server.ts: the claim pool and the ACK pool):
 * READ COMMITTED (see above; an ACK locks its rows by primary key), autocommit off so no
 * START TRANSACTION, and several statements per round trip — a claim is 2 or 3 round
 * trips, its latency a subscription's throughput (one claim in flight per application),
 * an ACK batch 2. Only claims and ACKs run there.
 */
export const ENGINE_SESSION: SessionMode = {
  isolation: "READ COMMITTED",
  implicitTransactions: true,
  multipleStatements: true,
};

export function secretDigest(secret: Buffer): Buffer {
  return createHash("sha256").update(secret).digest();
}

export interface Lease {
  readonly delivery: DeliveryWire;
  /** The event's wire JSON (toWireEventJson): it goes into the frame as it is. */
  readonly eventJson: string;
  /** base64url of the 32 random bytes; sent once, only its digest is stored. */
  readonly leaseSecret: string;
}

/** One connection's part of a claim. */
export interface ClaimSeat {
  readonly sessionId: string;
  readonly capacity: number;
  /** At most this many new leases (the connection's free write slots); default capacity. */
  readonly maxLeases?: number;
}

export interface ClaimRequest {
  readonly subscriptionId: string;
  readonly leaseDurationMs: number;
  /** The connections to lease for, in the order they are served. */
  readonly seats: readonly ClaimSeat[];
}

export interface SeatOutcome {
  readonly leases: Lease[];
  /** LEASED deliveries the session holds after this claim. */
  readonly held: number;
}

export interface ClaimOutcome {
  /** The subscription is paused: nothing was materialised or leased. */
  readonly paused: boolean;
  /** One per seat, in the request's order. */
  readonly seats: SeatOutcome[];
}

/**
 * Materialising never skips: when the next needed events were purged (the cursor is below
 * the retention boundary) nothing more is materialised (materialiseStatements checks it)
 * and the cursor stays. What was materialised before the gap is still owed — retention
 * keeps the events of deliveries that are not ACKED — so the claim recovers and leases it
 * as usual; only a claim that has room and finds nothing owed before the gap — nothing
 * PENDING to lease, no lease still to be ACKed or re-sent — fails with
 * EVENT_HISTORY_EXPIRED. Reporting the gap first would leave those deliveries PENDING (or
 * LEASED past their deadline) for good: every later claim would fail before leasing them.
 * EXPIRED ones do not hold the gap back: only a manual retry re-sends them, and a
 * connection after that retry gets them before the gap is reported again.
 */
function historyGap(s: ClaimStateRow): OrbitError | undefined {
  if (BigInt(s.cursor_sequence) >= BigInt(s.retention_boundary)) return undefined;
  return new OrbitError(
    "EVENT_HISTORY_EXPIRED",
    `events after ${s.cursor_sequence} up to ${s.retention_boundary} were purged before delivery`,
  );
}

/** "session:count,…" from the claim state query → count per session. */
function parseHeld(held: string | null): Map<string, number> {
  if (!held) return new Map();
  return new Map(
    held.split(",").map((pair) => [pair.slice(0, pair.indexOf(":")), Number(pair.slice(pair.indexOf(":") + 1))]),
  );
}

/**
 * The wire delivery of a row as leaseStatement left it — the same assignments, made here
 * instead of read back (a round trip less): the UPDATE matched exactly these PENDING
 * rows. Built directly in toWireDelivery's shape (a LEASED delivery: lease_until, no
 * acknowledged_at), the claim's lease_until formatted once for all of them: this runs for
 * every delivery of a drain, where a copy of the row and the general form show in the
 * node's CPU.
 */
export function leasedDelivery(
  subscriptionId: string,
  row: Omit<ClaimableRow, "ev">,
  leaseUntil: string,
): DeliveryWire {
  return {
    id: row.id,
    subscription_id: subscriptionId,
    event_id: row.event_id,
    sequence: row.sequence,
    revision: (BigInt(row.revision) + 1n).toString(),
    state: "LEASED",
    created_at: formatTimestamp(row.created_at),
    available_at: formatTimestamp(row.available_at),
    lease_epoch: (BigInt(row.lease_epoch) + 1n).toString(),
    lease_until: leaseUntil,
    attempts: row.attempts + 1,
    attempt_budget: row.attempt_budget,
  };
}

/** How many each seat may take: its room (capacity − held, its write slots), in seat order. */
function shares(seats: readonly ClaimSeat[], held: ReadonlyMap<string, number>, available: number): number[] {
  let left = available;
  return seats.map((seat) => {
    const room = Math.max(
      0,
      Math.min(seat.capacity - (held.get(seat.sessionId) ?? 0), seat.maxLeases ?? seat.capacity),
    );
    const n = Math.min(room, left);
    left -= n;
    return n;
  });
}

/** Deliveries counted by one claim, reported only once its transaction committed. */
interface Counted {
  created: number;
  leased: number;
  expired: number;
}

export async function claim(pool: Pool, r: ClaimRequest, signal?: AbortSignal): Promise<ClaimOutcome> {
  // Counted only once the transaction committed (a retried attempt starts from zero).
  let counted: Counted = { created: 0, leased: 0, expired: 0 };
  const out = await withTransaction(
    pool,
    async (tx): Promise<ClaimOutcome> => {
      counted = { created: 0, leased: 0, expired: 0 };
      return claimIn(tx, r, counted);
    },
    signal,
    "READ COMMITTED",
  );
  metrics.deliveries.inc({ stage: "created" }, counted.created);
  metrics.deliveries.inc({ stage: "leased" }, counted.leased);
  metrics.deliveries.inc({ stage: "expired" }, counted.expired);
  return out;
}

/** One attempt of a claim, inside its transaction: the phases in order. */
async function claimIn(tx: Tx, r: ClaimRequest, counted: Counted): Promise<ClaimOutcome> {
  const now = nowMs();
  const sessionIds = r.seats.map((seat) => seat.sessionId);
  const deferred = nothingToMaterialise.has(r.subscriptionId);
  const first = await lockAndRead(tx, r, now, sessionIds, deferred);
  const s = first.state;
  const held = parseHeld(s.held);
  const idle = (): ClaimOutcome => ({
    paused: !s.enabled,
    seats: sessionIds.map((id) => ({ leases: [], held: held.get(id) ?? 0 })),
  });
  // Paused: nothing was materialised (the first round trip's statements check it) and
  // nothing is claimed, so a purged history is not this claim's to report — a paused
  // subscription keeps its connections (docs/protocol.md §3, §7); the first claim after
  // it is enabled again reports the gap.
  if (!s.enabled) return idle();
  const gap = historyGap(s);
  if (!deferred) counted.created = (first.results[2] as ResultSetHeader).affectedRows;
  // The state counts the backlog only when the log has news and few are ready: when it
  // does not, the next claim will most likely have nothing to materialise either.
  hint(r.subscriptionId, s.backlog === null);
  const wanted = shares(r.seats, held, Number.MAX_SAFE_INTEGER).reduce((a, b) => a + b, 0);
  let rows = toClaimable(first.results[first.results.length - 1]);
  const materialise = deferred && s.backlog !== null;
  if (materialise || s.lease_expired) rows = await catchUp(tx, s, now, materialise, wanted, counted);
  rows = rows.slice(0, wanted);
  if (rows.length === 0) {
    // Room, and nothing owed before the gap left to lease or to ACK: now the gap is this
    // claim's to report (a rare path: one more round trip, under the subscription's lock).
    if (gap && wanted > 0 && !(await anyLeased(tx, s.id))) throw gap;
    return idle();
  }
  const leases = assignLeases(r.seats, held, rows);
  const leaseUntil = new Date(now.getTime() + r.leaseDurationMs);
  const granted = await commitLeases(tx, r.subscriptionId, leases, leaseUntil, sessionIds);
  counted.leased = granted.length;
  return {
    paused: false,
    seats: r.seats.map((seat) => {
      const mine = granted.filter((b) => b.sessionId === seat.sessionId).map((b) => b.lease);
      return { held: (held.get(seat.sessionId) ?? 0) + mine.length, leases: mine };
    }),
  };
}

/**
 * Round trip 1: the lock with the state, materialising when the state says so (unless
 * the hint says there will be nothing to), and the oldest claimable rows — enough for
 * this claim unless materialising or recovery changes them. A subscription that is gone
 * is NOT_FOUND; a revoked credential is UNAUTHENTICATED.
 */
async function lockAndRead(
  tx: Tx,
  r: ClaimRequest,
  now: Date,
  sessionIds: readonly string[],
  deferred: boolean,
): Promise<{ state: ClaimStateRow; results: unknown[] }> {
  const upper = r.seats.reduce((n, seat) => n + Math.min(seat.capacity, seat.maxLeases ?? seat.capacity), 0);
  const first = await queryAll(tx, [
    resetClaimState,
    claimStateStatement(r.subscriptionId, { now, readyUpTo: READY_LOW_WATER, sessionIds }),
    ...(deferred ? [] : materialiseStatements(r.subscriptionId, now)),
    claimableStatement(r.subscriptionId, upper),
  ]);
  const s = toClaimState(first[1]);
  if (!s) throw new OrbitError("NOT_FOUND");
  if (s.credential_revoked) throw new OrbitError("UNAUTHENTICATED", "the credential was revoked");
  return { state: s, results: first };
}

/**
 * Round trip 2, only when needed: the materialising the first one left out (the state
 * says there may be something to do: it is the judge, as in the first round trip), and
 * recovery — recovered leases are PENDING again with their old, lower sequences, so they
 * go first. Then the claimable rows again.
 */
async function catchUp(
  tx: Tx,
  s: ClaimStateRow,
  now: Date,
  materialise: boolean,
  wanted: number,
  counted: Counted,
): Promise<ClaimableRow[]> {
  const more = await queryAll(tx, [
    ...(materialise ? materialiseStatements(s.id, now) : []),
    ...(s.lease_expired ? recoveryStatements(s.id, now) : []),
    claimableStatement(s.id, wanted),
  ]);
  if (materialise) counted.created = (more[0] as ResultSetHeader).affectedRows;
  if (s.lease_expired) counted.expired = (more[materialise ? 2 : 0] as ResultSetHeader).affectedRows;
  return toClaimable(more[more.length - 1]);
}

interface Assigned {
  readonly row: ClaimableRow;
  readonly sessionId: string;
  readonly secret: Buffer;
}

/**
 * The rows to lease, each with its seat and a new secret: oldest first to the first seat
 * (the scheduler's order is arrival order), each seat up to its share.
 */
function assignLeases(
  seats: readonly ClaimSeat[],
  held: ReadonlyMap<string, number>,
  rows: readonly ClaimableRow[],
): Assigned[] {
  let next = 0;
  // One call for every secret of the claim: randomBytes per lease would cost a call each.
  const random = randomBytes(LEASE_SECRET_BYTES * rows.length);
  return shares(seats, held, rows.length).flatMap((n, k) =>
    rows.slice(next, (next += n)).map((row, j) => {
      const at = (next - n + j) * LEASE_SECRET_BYTES;
      return { row, sessionId: seats[k]!.sessionId, secret: random.subarray(at, at + LEASE_SECRET_BYTES) };
    }),
  );
}

/**
 * Last round trip: the lease and COMMIT together. Answers the leases that were granted,
 * each with its seat; the frames go out only after this returns, so every lease is
 * durable before its frame is sent.
 */
async function commitLeases(
  tx: Tx,
  subscriptionId: string,
  leases: readonly Assigned[],
  leaseUntil: Date,
  sessionIds: readonly string[],
): Promise<{ readonly sessionId: string; readonly lease: Lease }[]> {
  const committing = commitWith(
    tx,
    leaseStatement(
      leases.map((l) => ({ id: l.row.id, sessionId: l.sessionId, digest: secretDigest(l.secret) })),
      leaseUntil,
    ),
  );
  committing.catch(() => undefined); // awaited below; this only keeps a throw in between from leaving it unhandled
  // Built while MariaDB runs the lease and its COMMIT, off the claim's serial path; none
  // leaves this function before the COMMIT's answer, and only what it leased is sent.
  const leaseUntilText = formatTimestamp(leaseUntil);
  const built = leases.map((l) => ({
    sessionId: l.sessionId,
    lease: {
      delivery: leasedDelivery(subscriptionId, l.row, leaseUntilText),
      eventJson: toWireEventJson(l.row.ev),
      leaseSecret: encodeBase64url(l.secret),
    },
  }));
  const res = (await committing) as ResultSetHeader;
  if (res.affectedRows === leases.length) return built;
  // A late ACK (the latest proof of a recovered lease) took a row between the read and
  // the lease; the rest is leased and committed. Send only what was leased.
  const got = await selectLeasedTo(
    tx,
    leases.map((l) => l.row.id),
    sessionIds,
    leaseUntil,
  );
  return built.filter((b) => got.has(b.lease.delivery.id));
}

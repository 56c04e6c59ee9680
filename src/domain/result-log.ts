// The result log (docs/tasks.md).
//
// Append: a task transition inserts its event in the SAME transaction as the task change,
// unnumbered. Number: the sequencer gives committed events the next sequences and moves
// the committed head, in one short transaction of 2 round trips per batch:
//
//   SELECT head FROM namespace_streams … FOR UPDATE      -- sequencers take turns
//   SELECT ticket … WHERE sequence IS NULL … SKIP LOCKED  -- committed events only
//   ---
//   UPDATE result_events SET sequence = head+1 … ; UPDATE namespace_streams SET head = …
//   COMMIT
//
// So sequences are 1, 2, … with no gaps (only committed rows are numbered, and the head
// moves with them), and every event with sequence <= head is committed and visible: a
// reader scanning up to the head can never pass an event that commits later. Producers
// never wait on a per-namespace lock held through their own commit, which would cap appends
// near one commit latency each. The sequencer runs READ COMMITTED so its scan takes no gap
// locks that would block producers' inserts.
import type { Pool, Tx } from "../db/types.js";
import { queryAll, withTransaction, type Statement } from "../db/tx.js";
import type { RowDataPacket } from "mysql2/promise";
import {
  assignSequences,
  deleteEventsUpTo,
  insertEventStatement,
  lockStreamStatement,
  raiseBoundary,
  selectEvents,
  selectFirstSequenceSince,
  selectStream,
  unsequencedStatement,
  type EventRow,
  type StreamRow,
  type WireEventRow,
} from "../db/queries/result-log.js";
import { advanceCursorsPastPurge, lockNamespaceForPurge } from "../db/queries/subscriptions.js";
import type { components } from "../../generated/http/openapi-types.js";
import { formatTimestamp } from "../wire/time.js";
import { newId } from "./identity.js";

/** The contract's event (openapi.yaml, generated): the shapes below are its own. */
type ResultEvent = components["schemas"]["ResultEvent"];

/** The four result types a subscription delivers, in their normalised (sorted) order. */
export const RESULT_EVENT_TYPES = [
  "task.cancelled",
  "task.failed",
  "task.needs_review",
  "task.succeeded",
] as const satisfies readonly ResultEvent["type"][];
export type ResultEventType = (typeof RESULT_EVENT_TYPES)[number];
/** Every type in the log: the results, and the safe-retry event no subscription receives. */
export type EventType = ResultEventType | "task.requeued";

export function isResultEventType(t: string): t is ResultEventType {
  return (RESULT_EVENT_TYPES as readonly string[]).includes(t);
}

/** The event's snapshot and details, as the contract defines them (docs/protocol.md §6 `event`). */
export type Snapshot = ResultEvent["snapshot"];
export type Details = ResultEvent["details"];

export interface NewEvent {
  readonly namespaceId: string;
  readonly queueId: string;
  readonly type: EventType;
  readonly taskId: string;
  readonly taskRevision: string;
  readonly occurredAt: Date;
  readonly details: Details;
  readonly snapshot: Snapshot;
}

/**
 * The wire shape of docs/protocol.md §6 `event` — the contract's ResultEvent, generated from
 * openapi.yaml. T widens the type for the operator's view of the log, which also holds
 * `task.requeued` (no subscription receives it).
 */
export type ResultEventWire<T extends EventType = ResultEventType> = Omit<ResultEvent, "type"> & { type: T };

/** The INSERT that appends `e` (unnumbered) inside the caller's transaction, for it to send with its other writes. */
export function appendEventStatement(e: NewEvent): Statement {
  return insertEventStatement({
    id: newId(),
    namespace_id: e.namespaceId,
    queue_id: e.queueId,
    type: e.type,
    aggregate_id: e.taskId,
    aggregate_revision: e.taskRevision,
    occurred_at: e.occurredAt,
    details: JSON.stringify(e.details),
    snapshot: JSON.stringify(e.snapshot),
  });
}

/** Any event of the log (requeues included), for the operator's view. */
export function toLogEvent(row: EventRow): ResultEventWire<EventType> {
  if (row.sequence === null) throw new Error("an unnumbered event is not visible");
  return {
    id: row.id,
    sequence: row.sequence,
    type: row.type as EventType,
    aggregate_kind: "task",
    aggregate_id: row.aggregate_id,
    aggregate_revision: row.aggregate_revision,
    occurred_at: formatTimestamp(row.occurred_at),
    details: JSON.parse(row.details) as Details,
    snapshot: JSON.parse(row.snapshot) as Snapshot,
  };
}

/** A result event, as subscriptions deliver it. */
export function toWireEvent(row: EventRow): ResultEventWire {
  const e = toLogEvent(row);
  if (!isResultEventType(e.type)) throw new Error(`a ${e.type} event is not a result`);
  return { ...e, type: e.type };
}

const json = JSON.stringify;

/**
 * A result event's wire JSON for an event.deliver frame: the text of
 * JSON.stringify(toWireEvent(row)), with details and snapshot spliced in as stored. They
 * are stored as JSON.stringify made them (appendEventStatement), which parsing and writing
 * again gives back unchanged — the snapshot's result is a string of up to kilobytes,
 * re-escaped both ways, on every delivery.
 */
export function toWireEventJson(row: WireEventRow): string {
  if (row.sequence === null) throw new Error("an unnumbered event is not visible");
  if (!isResultEventType(row.type)) throw new Error(`a ${row.type} event is not a result`);
  return `{"id":${json(row.id)},"sequence":${json(row.sequence)},"type":${json(row.type)},"aggregate_kind":"task",\
"aggregate_id":${json(row.aggregate_id)},"aggregate_revision":${json(row.aggregate_revision)},\
"occurred_at":${json(formatTimestamp(row.occurred_at))},"details":${row.details},"snapshot":${row.snapshot}}`;
}

/** How many events one sequencer transaction numbers at most. */
export const SEQUENCE_BATCH = 500;

/**
 * Numbers the committed, unnumbered events of a namespace (one batch). Returns how many
 * it numbered; SEQUENCE_BATCH means there may be more.
 */
export async function sequenceBatch(pool: Pool, namespaceId: string): Promise<number> {
  return withTransaction(
    pool,
    async (tx) => {
      // Round trip 1 (with the opening): the lock, then — in turn, so after it — the tickets.
      const [streams, unsequenced] = (await queryAll(tx, [
        lockStreamStatement(namespaceId),
        unsequencedStatement(namespaceId, SEQUENCE_BATCH),
      ])) as RowDataPacket[][];
      const stream = streams![0] as StreamRow | undefined;
      if (!stream) return 0;
      const tickets = unsequenced!.map((r) => String(r.ticket));
      if (tickets.length === 0) return 0;
      // Round trip 2: the numbers and the head go with COMMIT.
      await assignSequences(tx, namespaceId, tickets, BigInt(stream.head_sequence));
      return tickets.length;
    },
    undefined,
    "READ COMMITTED",
  );
}

export interface StreamPosition {
  readonly head: string;
  readonly retentionBoundary: string;
}

export async function readStream(db: Pool | Tx, namespaceId: string): Promise<StreamPosition> {
  const s = await selectStream(db, namespaceId);
  return { head: s?.head_sequence ?? "0", retentionBoundary: s?.retention_boundary ?? "0" };
}

/** Reads numbered events after `after`, never past the committed head. */
export async function readEvents(
  db: Pool,
  namespaceId: string,
  after: string,
  limit: number,
): Promise<ResultEventWire<EventType>[]> {
  const { head } = await readStream(db, namespaceId);
  const rows = await selectEvents(db, namespaceId, after, head, limit);
  return rows.map(toLogEvent);
}

export class PurgeError extends Error {}

/**
 * Deletes the events with sequence < `before` and raises the retention boundary to
 * before - 1, durably. `before` may be at most head + 1 (purging what is not numbered
 * yet would let the sequencer number it below the boundary). Returns the namespace's
 * boundary afterwards: a `before` below it never lowers it.
 */
export async function purge(
  pool: Pool,
  namespaceId: string,
  before: bigint,
): Promise<{ deleted: number; boundary: string }> {
  if (before < 1n) throw new PurgeError("--before must be at least 1");
  const boundary = (before - 1n).toString();
  let raisedTo = boundary;
  // The boundary goes up first, in its own transaction, under the namespace's, the
  // stream's and every subscription's lock: from then on nobody may start reading below it,
  // and subscriptions that lose nothing to it move past it (advanceCursorsPastPurge); the
  // rows are deleted afterwards in batches. READ COMMITTED: the cursor check's reads of
  // the log take no gap locks in the producers' way.
  await withTransaction(
    pool,
    async (tx) => {
      await lockNamespaceForPurge(tx, namespaceId);
      const s = await selectStream(tx, namespaceId, true);
      if (!s) throw new PurgeError("no such namespace");
      if (before - 1n > BigInt(s.head_sequence))
        throw new PurgeError(`--before must be at most head + 1 (${BigInt(s.head_sequence) + 1n})`);
      if (BigInt(boundary) > BigInt(s.retention_boundary)) await advanceCursorsPastPurge(tx, namespaceId, boundary);
      else raisedTo = String(s.retention_boundary);
      await raiseBoundary(tx, namespaceId, boundary);
    },
    undefined,
    "READ COMMITTED",
  );
  return { deleted: await deleteUpToBoundary(pool, namespaceId, boundary), boundary: raisedTo };
}

/**
 * Deletes the events at or below a boundary already raised, in batches of 1,000. READ
 * COMMITTED: under REPEATABLE READ each batch's next-key locks would cover the gap where
 * the namespace's new, unnumbered events are inserted, holding the producers back.
 */
async function deleteUpToBoundary(pool: Pool, namespaceId: string, boundary: string): Promise<number> {
  let deleted = 0;
  for (;;) {
    const n = await withTransaction(
      pool,
      (tx) => deleteEventsUpTo(tx, namespaceId, boundary, 1000),
      undefined,
      "READ COMMITTED",
    );
    deleted += n;
    if (n < 1000) return deleted;
  }
}

/** Age-based retention (ORBIT_RETENTION): purges what occurred before now - retentionMs. */
export async function purgeOlderThan(
  pool: Pool,
  namespaceId: string,
  retentionMs: number,
  now = new Date(),
): Promise<number> {
  const cutoff = new Date(now.getTime() - retentionMs);
  const { head, retentionBoundary } = await readStream(pool, namespaceId);
  // Everything numbered before the first event that is still young enough goes. Only the
  // retained log is searched: what lies at or below the boundary goes anyway (below).
  const first = await selectFirstSequenceSince(pool, namespaceId, retentionBoundary, cutoff);
  const before = first !== undefined ? BigInt(first) : BigInt(head) + 1n;
  // The boundary stays: still delete what it left behind — the rows of a purge that died
  // between raising it and its deletes, and events kept for a delivery that was ACKED
  // since. Otherwise they would stay until the boundary next moves: in a namespace that
  // gets no new events, for ever.
  if (before - 1n <= BigInt(retentionBoundary)) return deleteUpToBoundary(pool, namespaceId, retentionBoundary);
  return (await purge(pool, namespaceId, before)).deleted;
}

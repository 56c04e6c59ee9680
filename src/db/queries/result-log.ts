// SQL for the result log: namespace_streams and result_events.
import type { ResultSetHeader, RowDataPacket } from "mysql2/promise";
import type { Pool, Tx } from "../types.js";
import { defer, type Statement } from "../tx.js";

export interface EventRow {
  id: string;
  namespace_id: string;
  queue_id: string;
  sequence: string | null;
  type: string;
  aggregate_id: string;
  aggregate_revision: string;
  occurred_at: Date;
  details: string;
  snapshot: string;
}

export type NewEventRow = Omit<EventRow, "sequence">;

/** The parts of an event its wire form shows (domain/result-log.ts toWireEventJson). */
export type WireEventRow = Pick<
  EventRow,
  "id" | "sequence" | "type" | "aggregate_id" | "aggregate_revision" | "occurred_at" | "details" | "snapshot"
>;

/**
 * Inserts an event, not yet numbered: the sequencer gives it its sequence after commit.
 * Deferred (tx.ts): nothing reads its result; it travels with the next statement or COMMIT.
 */
export function insertEvent(tx: Tx, e: NewEventRow): Promise<void> {
  return defer(tx, insertEventStatement(e));
}

export function insertEventStatement(e: NewEventRow): Statement {
  return {
    sql: `INSERT INTO result_events
            (id, namespace_id, queue_id, sequence, type, aggregate_id, aggregate_revision, occurred_at, details, snapshot)
          VALUES (?, ?, ?, NULL, ?, ?, ?, ?, ?, ?)`,
    params: [
      e.id,
      e.namespace_id,
      e.queue_id,
      e.type,
      e.aggregate_id,
      e.aggregate_revision,
      e.occurred_at,
      e.details,
      e.snapshot,
    ],
  };
}

export interface StreamRow {
  head_sequence: string;
  retention_boundary: string;
}

/** Takes a namespace; returns its committed head and retention boundary. */
export async function selectStream(db: Pool | Tx, namespaceId: string, lock = false): Promise<StreamRow | undefined> {
  const [rows] = await db.query<(StreamRow & RowDataPacket)[]>(
    `SELECT head_sequence, retention_boundary FROM namespace_streams WHERE namespace_id = ?${lock ? " FOR UPDATE" : ""}`,
    [namespaceId],
  );
  return rows[0];
}

/** The stream row, locked: sequencers of one namespace take turns (sequenceBatch). */
export function lockStreamStatement(namespaceId: string): Statement {
  return {
    sql: "SELECT head_sequence, retention_boundary FROM namespace_streams WHERE namespace_id = ? FOR UPDATE",
    params: [namespaceId],
  };
}

/**
 * The tickets of committed, unnumbered events of a namespace, in insert order. SKIP
 * LOCKED passes over rows whose inserting transaction is still open: they are numbered by
 * a later round, after they commit.
 */
export function unsequencedStatement(namespaceId: string, limit: number): Statement {
  return {
    sql: `SELECT ticket FROM result_events
           WHERE namespace_id = ? AND sequence IS NULL
           ORDER BY ticket LIMIT ? FOR UPDATE SKIP LOCKED`,
    params: [namespaceId, limit],
  };
}

/** Numbers the given tickets head+1, head+2, … in the order given, and moves the head; deferred (tx.ts). */
export async function assignSequences(
  tx: Tx,
  namespaceId: string,
  tickets: readonly string[],
  head: bigint,
): Promise<void> {
  const cases = tickets.map(() => "WHEN ? THEN ?").join(" ");
  const params: (string | number)[] = [];
  tickets.forEach((t, i) => params.push(t, (head + BigInt(i + 1)).toString()));
  await defer(tx, {
    sql: `UPDATE result_events SET sequence = CASE ticket ${cases} END WHERE ticket IN (?)`,
    params: [...params, tickets],
  });
  await defer(tx, {
    sql: "UPDATE namespace_streams SET head_sequence = ?, updated_at = UTC_TIMESTAMP(3) WHERE namespace_id = ?",
    params: [(head + BigInt(tickets.length)).toString(), namespaceId],
  });
}

/** Namespaces that have committed events waiting for a number (the sweep's query). */
export async function selectNamespacesWithUnsequenced(db: Pool): Promise<string[]> {
  const [rows] = await db.query<RowDataPacket[]>(
    "SELECT DISTINCT namespace_id FROM result_events WHERE sequence IS NULL LIMIT 1000",
  );
  return rows.map((r) => r.namespace_id as string);
}

/** Takes a namespace and a range; returns its numbered events after `after`, up to `upTo`. */
export async function selectEvents(
  db: Pool | Tx,
  namespaceId: string,
  after: string,
  upTo: string,
  limit: number,
): Promise<EventRow[]> {
  const [rows] = await db.query<(EventRow & RowDataPacket)[]>(
    `SELECT id, namespace_id, queue_id, sequence, type, aggregate_id, aggregate_revision, occurred_at, details, snapshot
       FROM result_events
      WHERE namespace_id = ? AND sequence > ? AND sequence <= ?
      ORDER BY sequence LIMIT ?`,
    [namespaceId, after, upTo, limit],
  );
  return rows;
}

/**
 * Deletes numbered events with sequence <= boundary; returns how many. Events that a
 * delivery still has to deliver (not ACKED) stay: a materialised delivery is never
 * left without its event.
 */
export async function deleteEventsUpTo(tx: Tx, namespaceId: string, boundary: string, limit: number): Promise<number> {
  const [res] = await tx.query<ResultSetHeader>(
    `DELETE FROM result_events
      WHERE namespace_id = ? AND sequence <= ?
        AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = result_events.id AND d.state <> 'ACKED')
      ORDER BY sequence LIMIT ?`,
    [namespaceId, boundary, limit],
  );
  return res.affectedRows;
}

export async function raiseBoundary(tx: Tx, namespaceId: string, boundary: string): Promise<void> {
  await tx.query(
    `UPDATE namespace_streams SET retention_boundary = GREATEST(retention_boundary, ?), updated_at = UTC_TIMESTAMP(3)
      WHERE namespace_id = ?`,
    [boundary, namespaceId],
  );
}

/**
 * The first numbered sequence of a namespace above `after` (its retention boundary) that
 * occurred at or after `since`, if any. In sequence order, stopping at the first: the rows
 * it passes are the ones the sweep is about to purge, those that grew old since its last
 * run. MIN(sequence) over the same rows would read every retained event of the namespace
 * on each sweep, and pass over the rows kept below the boundary for deliveries not yet
 * ACKED too.
 */
export async function selectFirstSequenceSince(
  db: Pool,
  namespaceId: string,
  after: string,
  since: Date,
): Promise<string | undefined> {
  const [rows] = await db.query<RowDataPacket[]>(
    `SELECT sequence FROM result_events FORCE INDEX (result_events_sequence)
      WHERE namespace_id = ? AND sequence > ? AND occurred_at >= ?
      ORDER BY sequence LIMIT 1`,
    [namespaceId, after, since],
  );
  const s = rows[0]?.sequence;
  return s === null || s === undefined ? undefined : String(s);
}

/** Every namespace id (for the retention sweep). */
export async function selectNamespaceIds(db: Pool): Promise<string[]> {
  const [rows] = await db.query<RowDataPacket[]>("SELECT namespace_id FROM namespace_streams");
  return rows.map((r) => r.namespace_id as string);
}

/** Takes an event id; returns the event if it is numbered and not purged. */
export async function selectEventById(db: Pool | Tx, id: string): Promise<EventRow | undefined> {
  const [rows] = await db.query<(EventRow & RowDataPacket)[]>(
    `SELECT id, namespace_id, queue_id, sequence, type, aggregate_id, aggregate_revision, occurred_at, details, snapshot
       FROM result_events WHERE id = ? AND sequence IS NOT NULL`,
    [id],
  );
  return rows[0];
}

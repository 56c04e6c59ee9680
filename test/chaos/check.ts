// The chaos run's history checker: once every fault is over and the system has settled,
// the database, the Inboxes and what the clients were told must agree. Each check is a
// rule a user relies on; each says what broke it.
import type mysql from "mysql2/promise";
import type { History } from "./traffic.js";
import { stateOf } from "./outcome.js";

export interface Check {
  readonly name: string;
  readonly problems: string[];
}

export interface Subscription {
  readonly id: string;
  /** The Inbox database its consumers apply events to. */
  readonly inbox: string;
}

const ENDED = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
/** At most this many problems are listed per check; the count says how many there were. */
const SHOWN = 5;

function check(name: string, problems: string[]): Check {
  return { name, problems };
}

export async function checkHistory(
  db: mysql.Connection,
  o: {
    readonly namespaceId: string;
    readonly subscriptions: readonly Subscription[];
    readonly history: History;
    /** Log lines of the nodes that say something went wrong inside (level error, a 5xx other than 503). */
    readonly nodeErrors: readonly string[];
    /** Exits of nodes, workers and consumers that the run did not cause. */
    readonly unexpectedExits: readonly string[];
  },
): Promise<Check[]> {
  const h = o.history;
  const checks: Check[] = [];
  checks.push(check("no node answered 500 or logged an internal error", [...o.nodeErrors]));
  checks.push(check("no client got a 5xx other than 503, or a refusal it did not ask for", [...h.wrongAnswers]));
  checks.push(check("no process exited unless the run stopped it", [...o.unexpectedExits]));

  const [taskRows] = await db.query<mysql.RowDataPacket[]>("SELECT id, state FROM tasks");
  const tasks = new Map(taskRows.map((r) => [r.id as string, r.state as string]));
  const confirmed = new Set(h.submitted.values());
  checks.push(
    check("every confirmed submit is a task, and every task a confirmed submit", [
      ...[...h.submitted].filter(([, id]) => !tasks.has(id)).map(([i, id]) => `submit ${i}: task ${id} is missing`),
      // Each submit was sent until it was answered: a task no answer named is a duplicate.
      ...[...tasks.keys()].filter((id) => !confirmed.has(id)).map((id) => `task ${id} was never confirmed`),
    ]),
  );
  checks.push(
    check(
      "every task ended",
      [...tasks].filter(([, s]) => !ENDED.has(s)).map(([id, s]) => `task ${id} is ${s}`),
    ),
  );
  const [attemptRows] = await db.query<mysql.RowDataPacket[]>(
    "SELECT id, task_id FROM task_attempts WHERE ended_by = 'complete'",
  );
  /** Attempts that ended by a completion, with their tasks. */
  const completedAttempts = new Map(attemptRows.map((r) => [r.id as string, r.task_id as string]));
  const kept: string[] = [];
  for (const [id, { state, attemptId }] of h.completed) {
    if (tasks.get(id) !== state) kept.push(`completed ${id} ${state}, reads ${tasks.get(id)}`);
    if (completedAttempts.get(attemptId) !== id)
      kept.push(`attempt ${attemptId} of ${id} was completed, and did not end so`);
  }
  for (const attemptId of h.completionRefused)
    if (completedAttempts.has(attemptId)) kept.push(`attempt ${attemptId} was refused its completion, and ended by it`);
  // Only the producers cancel: every CANCELLED task is a cancel they were told took place.
  for (const id of h.cancelled) if (tasks.get(id) !== "CANCELLED") kept.push(`cancelled ${id}, reads ${tasks.get(id)}`);
  for (const [id, state] of tasks)
    if (state === "CANCELLED" && !h.cancelled.has(id))
      kept.push(`task ${id} is CANCELLED, its cancel ${h.cancelRefused.has(id) ? "refused" : "never confirmed"}`);
  for (const [id, state] of tasks)
    if ((state === "SUCCEEDED" || state === "FAILED") && state !== stateOf(id))
      kept.push(`task ${id} is ${state}, its worker answered ${stateOf(id)}`);
  checks.push(
    check(
      "every confirmed completion and cancel holds, no refused one took place, and every outcome is its worker's",
      kept,
    ),
  );

  const [eventRows] = await db.query<mysql.RowDataPacket[]>(
    "SELECT aggregate_id, type, COUNT(*) AS n FROM result_events WHERE type <> 'task.requeued' GROUP BY aggregate_id, type",
  );
  const results = new Map<string, string[]>();
  for (const r of eventRows) {
    const list = results.get(r.aggregate_id as string) ?? [];
    for (let k = 0; k < Number(r.n); k++) list.push(r.type as string);
    results.set(r.aggregate_id as string, list);
  }
  const once: string[] = [];
  for (const [id, state] of tasks) {
    const got = results.get(id) ?? [];
    const want = ENDED.has(state) ? [`task.${state.toLowerCase()}`] : [];
    if (got.join() !== want.join()) once.push(`task ${id} (${state}) has result events [${got.join(", ")}]`);
  }
  for (const id of results.keys()) if (!tasks.has(id)) once.push(`result event for a task that does not exist: ${id}`);
  checks.push(check("every ended task has exactly one result event", once));

  const [[log]] = await db.query<mysql.RowDataPacket[]>(
    `SELECT COUNT(*) AS n, COUNT(sequence) AS numbered, MIN(sequence) AS lo, MAX(sequence) AS hi,
            (SELECT head_sequence FROM namespace_streams WHERE namespace_id = ?) AS head
       FROM result_events WHERE namespace_id = ?`,
    [o.namespaceId, o.namespaceId],
  );
  const n = Number(log!.n);
  const gap =
    Number(log!.numbered) === n &&
    (n === 0 || (Number(log!.lo) === 1 && Number(log!.hi) === n)) &&
    Number(log!.head ?? 0) === n
      ? []
      : [`${n} events, ${log!.numbered} numbered, sequences ${log!.lo}..${log!.hi}, head_sequence ${log!.head}`];
  checks.push(check("the result log has no gap", gap));

  const ended: string[] = [];
  const inboxes: string[] = [];
  for (const sub of o.subscriptions) {
    const [rows] = await db.query<mysql.RowDataPacket[]>(
      `SELECT e.id AS event_id, e.type, d.state, d.attempts, d.attempt_budget
         FROM subscriptions s
         JOIN result_events e ON e.namespace_id = s.namespace_id AND e.queue_id = s.queue_id
          AND FIND_IN_SET(e.type, s.types) AND e.sequence IS NOT NULL
         LEFT JOIN deliveries d ON d.subscription_id = s.id AND d.event_id = e.id
        WHERE s.id = ?`,
      [sub.id],
    );
    const acked = new Set<string>();
    const events = new Map<string, string>();
    for (const r of rows) {
      events.set(r.event_id as string, r.type as string);
      if (r.state === "ACKED") acked.add(r.event_id as string);
      else if (r.state === null) ended.push(`${sub.id}: event ${r.event_id} was never delivered`);
      else if (r.state !== "EXPIRED") ended.push(`${sub.id}: event ${r.event_id} is ${r.state}`);
      else if (Number(r.attempts) < Number(r.attempt_budget))
        ended.push(`${sub.id}: event ${r.event_id} EXPIRED after ${r.attempts} of ${r.attempt_budget} attempts`);
    }
    const [applied] = await db.query<mysql.RowDataPacket[]>(`SELECT event_id FROM \`${sub.inbox}\`.inbox`);
    const [totals] = await db.query<mysql.RowDataPacket[]>(`SELECT state, n FROM \`${sub.inbox}\`.outcome_totals`);
    const inInbox = new Set(applied.map((r) => r.event_id as string));
    for (const id of acked) if (!inInbox.has(id)) inboxes.push(`${sub.id}: ACKED event ${id} is not in its Inbox`);
    const want = new Map<string, number>();
    for (const id of inInbox) {
      const type = events.get(id);
      if (!type) inboxes.push(`${sub.id}: its Inbox holds ${id}, not one of its events`);
      else
        want.set(
          type.slice("task.".length).toUpperCase(),
          (want.get(type.slice("task.".length).toUpperCase()) ?? 0) + 1,
        );
    }
    const got = new Map(totals.map((t) => [t.state as string, Number(t.n)]));
    for (const state of new Set([...got.keys(), ...want.keys()]))
      if ((got.get(state) ?? 0) !== (want.get(state) ?? 0))
        inboxes.push(
          `${sub.id}: effect ${state} applied ${got.get(state) ?? 0} times for ${want.get(state) ?? 0} events`,
        );
  }
  checks.push(check("every delivery ended ACKED, or EXPIRED with its attempt budget spent", ended));
  checks.push(check("every ACKED event reached its Inbox, and every Inbox effect applied once", inboxes));

  // A confirmed ACK is durable: its delivery stays ACKED at the epoch it was confirmed
  // at. Had the ACK been lost, the delivery would have been leased again, at a newer epoch.
  const [ackedRows] = await db.query<mysql.RowDataPacket[]>(
    "SELECT id, state, lease_epoch FROM deliveries WHERE state = 'ACKED'",
  );
  const ackedAt = new Map(ackedRows.map((r) => [r.id as string, String(r.lease_epoch)]));
  const acks: string[] = [];
  for (const [id, epochs] of h.acksConfirmed) {
    const at = ackedAt.get(id);
    if (at === undefined) acks.push(`delivery ${id}: its ACK was confirmed, it is not ACKED`);
    else if (epochs.size !== 1 || !epochs.has(at))
      acks.push(`delivery ${id}: confirmed at epoch ${[...epochs].join(", ")}, ACKED at ${at}`);
  }
  checks.push(check("every ACK the node confirmed holds, at the epoch it confirmed", acks));

  const [audits] = await db.query<mysql.RowDataPacket[]>(
    `SELECT d.id, d.state, (SELECT COUNT(*) FROM audit_records a WHERE a.delivery_id = d.id AND a.action = 'delivery.ack') AS n
       FROM deliveries d HAVING n <> (d.state = 'ACKED')`,
  );
  checks.push(
    check(
      "every ACKED delivery has one ACK audit record, and no other has any",
      audits.map((r) => `delivery ${r.id} (${r.state}) has ${r.n} ACK audit records`),
    ),
  );
  return checks;
}

/** The report's lines: one per check, its first problems under it, then `N passed, M failed`. */
export function report(checks: readonly Check[]): { lines: string[]; failed: number } {
  const lines: string[] = [];
  for (const c of checks) {
    lines.push(`${c.problems.length === 0 ? "pass" : "FAIL"}  ${c.name}`);
    for (const p of c.problems.slice(0, SHOWN)) lines.push(`        ${p}`);
    if (c.problems.length > SHOWN) lines.push(`        … and ${c.problems.length - SHOWN} more`);
  }
  const failed = checks.filter((c) => c.problems.length > 0).length;
  lines.push(`${checks.length - failed} passed, ${failed} failed`);
  return { lines, failed };
}

// SQL for tasks and task_attempts. Row types mirror the columns.
import type { RowDataPacket } from "mysql2/promise";
import type { Pool, Tx } from "../types.js";
import { defer, type Statement } from "../tx.js";
import { keyWithReceiptStatement, type IdempotencyKeyRef } from "./idempotency.js";

export type TaskState = "QUEUED" | "RUNNING" | "SUCCEEDED" | "FAILED" | "CANCELLED" | "NEEDS_REVIEW";

export interface TaskRow {
  id: string;
  namespace_id: string;
  queue_id: string;
  state: TaskState;
  revision: string;
  attempts: number;
  max_attempts: number;
  effect_uncertain: number;
  result: string | null;
  current_attempt_id: string | null;
  lease_until: Date | null;
  created_at: Date;
  updated_at: Date;
}

const TASK_COLUMNS = `id, namespace_id, queue_id, state, revision, attempts, max_attempts, effect_uncertain,
  result, current_attempt_id, lease_until, created_at, updated_at`;

/** Whether the credential (the one parameter) is active now: 1, or 0 when revoked or gone. */
const CREDENTIAL_ACTIVE = "(SELECT revoked_at IS NULL FROM credentials WHERE id = ?) IS TRUE";

/** A new task as submitted. */
export interface NewTask {
  readonly id: string;
  readonly namespaceId: string;
  readonly queueId: string;
  readonly maxAttempts: number;
  readonly input: string;
  readonly now: Date;
}

/** A new QUEUED task's row as it is inserted, so nobody reads it back. */
export function newTaskRow(t: NewTask): TaskRow {
  return {
    id: t.id,
    namespace_id: t.namespaceId,
    queue_id: t.queueId,
    state: "QUEUED",
    revision: "1",
    attempts: 0,
    max_attempts: t.maxAttempts,
    effect_uncertain: 0,
    result: null,
    current_attempt_id: null,
    lease_until: null,
    created_at: t.now,
    updated_at: t.now,
  };
}

/**
 * A submit's statements, sent with its COMMIT in one round trip (commitAll), each write
 * guarded by the statement before, so that what is written is all or nothing without a
 * round trip between them:
 *  1-2. whether the credential is active now (`active`: 1 or 0), the revocation check of a
 *     caller authenticated from the node's memory;
 *  3. the idempotency key with its receipt, only if active; a key taken already (a replay,
 *     or a concurrent holder, whose commit this waits for) inserts nothing: affectedRows 0;
 *  4-5. the task, only if the key was inserted.
 * The session variable is set by each submit before it is read.
 */
export function submitStatements(
  t: NewTask,
  key: { ref: IdempotencyKeyRef; digest: Buffer; status: number; receipt: string },
): Statement[] {
  return [
    {
      sql: `SET @orbit_submit = ${CREDENTIAL_ACTIVE}`,
      params: [key.ref.credentialId],
    },
    { sql: "SELECT @orbit_submit AS active", params: [] },
    keyWithReceiptStatement(key.ref, key.digest, key.status, key.receipt, "@orbit_submit"),
    { sql: "SET @orbit_submit = ROW_COUNT() = 1", params: [] },
    {
      sql: `INSERT INTO tasks (id, namespace_id, queue_id, state, revision, attempts, max_attempts, effect_uncertain,
                          input, queued_at, created_at, updated_at)
            SELECT ?, ?, ?, 'QUEUED', 1, 0, ?, FALSE, ?, ?, ?, ? FROM DUAL WHERE @orbit_submit`,
      params: [t.id, t.namespaceId, t.queueId, t.maxAttempts, t.input, t.now, t.now, t.now],
    },
  ];
}

/**
 * For a submit the queued-task limit refuses: whether its credential is still active, and
 * whether its key already has a receipt (a submit that landed earlier). Plain reads: a
 * flood of refused submits takes no locks; a receipt found is read again, locked, by replay.
 */
export async function refusedSubmitCheck(
  tx: Tx,
  ref: IdempotencyKeyRef,
): Promise<{ active: boolean; landed: boolean }> {
  const [rows] = await tx.query<RowDataPacket[]>(
    `SELECT ${CREDENTIAL_ACTIVE} AS active,
            EXISTS (SELECT 1 FROM idempotency_keys WHERE credential_id = ? AND operation = ? AND idem_key = ?) AS landed`,
    [ref.credentialId, ref.credentialId, ref.operation, ref.key],
  );
  return { active: Number(rows[0]?.active) === 1, landed: Number(rows[0]?.landed) === 1 };
}

/**
 * How many tasks of a namespace are QUEUED, counting at most `limit`: a range of the claim
 * index (queue_id, state) per queue of the namespace, never more rows than the limit.
 */
export async function countQueued(pool: Pool, namespaceId: string, limit: number): Promise<number> {
  const [rows] = await pool.query<RowDataPacket[]>(
    `SELECT COUNT(*) AS n FROM (
       SELECT 1 FROM queues q JOIN tasks t FORCE INDEX (tasks_claim) ON t.queue_id = q.id AND t.state = 'QUEUED'
        WHERE q.namespace_id = ? LIMIT ?) AS waiting`,
    [namespaceId, limit],
  );
  return Number(rows[0]?.n ?? 0);
}

/** Takes a task id; returns the task (locked for update when `lock`). */
export async function selectTask(db: Pool | Tx, id: string, lock = false): Promise<TaskRow | undefined> {
  const [rows] = await db.query<(TaskRow & RowDataPacket)[]>(
    `SELECT ${TASK_COLUMNS} FROM tasks WHERE id = ?${lock ? " FOR UPDATE" : ""}`,
    [id],
  );
  return rows[0];
}

export interface TaskChange {
  state: TaskState;
  attempts?: number;
  effectUncertain: boolean;
  result?: string | null;
  currentAttemptId: string | null;
  leaseUntil: Date | null;
  /** Set when the task goes (back) to QUEUED: its place in the claim order. */
  queuedAt?: Date | null;
  now: Date;
}

/**
 * A state change guarded by the revision read under the row lock; every state change
 * bumps the revision (docs/tasks.md). The caller sends it (with others) and checks that it
 * changed one row.
 */
export function updateTaskStatement(id: string, expectedRevision: string, c: TaskChange): Statement {
  const sets = [
    "state = ?",
    "revision = revision + 1",
    "effect_uncertain = ?",
    "current_attempt_id = ?",
    "lease_until = ?",
    "updated_at = ?",
  ];
  const params: unknown[] = [c.state, c.effectUncertain, c.currentAttemptId, c.leaseUntil, c.now];
  if (c.attempts !== undefined) {
    sets.push("attempts = ?");
    params.push(c.attempts);
  }
  if (c.result !== undefined) {
    sets.push("result = ?");
    params.push(c.result);
  }
  if (c.queuedAt !== undefined) {
    sets.push("queued_at = ?");
    params.push(c.queuedAt);
  }
  return {
    sql: `UPDATE tasks SET ${sets.join(", ")} WHERE id = ? AND revision = ?`,
    params: [...params, id, expectedRevision],
  };
}

/**
 * Takes a queue; the statement that reads its `limit` oldest QUEUED tasks, oldest first,
 * locked. SKIP LOCKED lets concurrent claimers of one queue pass each other instead of
 * queueing on one row.
 */
export function nextQueuedStatement(queueId: string, limit: number): Statement {
  return {
    sql: `SELECT ${TASK_COLUMNS} FROM tasks WHERE queue_id = ? AND state = 'QUEUED'
      ORDER BY queued_at, id LIMIT ? FOR UPDATE SKIP LOCKED`,
    params: [queueId, limit],
  };
}

/** nextQueuedStatement, alone. */
export async function selectNextQueued(tx: Tx, queueId: string, limit: number): Promise<TaskRow[]> {
  const { sql, params } = nextQueuedStatement(queueId, limit);
  const [rows] = await tx.query<(TaskRow & RowDataPacket)[]>(sql, [...params]);
  return rows;
}

/** The statement that reads RUNNING tasks whose attempt lease ran out before `now` (optionally in one queue), locked. */
export function expiredStatement(now: Date, limit: number, queueId?: string): Statement {
  return {
    sql: `SELECT id FROM tasks WHERE state = 'RUNNING' AND lease_until < ?${queueId ? " AND queue_id = ?" : ""}
      ORDER BY lease_until LIMIT ? FOR UPDATE SKIP LOCKED`,
    params: queueId ? [now, queueId, limit] : [now, limit],
  };
}

/** expiredStatement, alone: the ids. */
export async function selectExpired(tx: Tx, now: Date, limit: number, queueId?: string): Promise<string[]> {
  const { sql, params } = expiredStatement(now, limit, queueId);
  const [rows] = await tx.query<RowDataPacket[]>(sql, [...params]);
  return rows.map((r) => r.id as string);
}

export interface AttemptRow {
  id: string;
  task_id: string;
  number: number;
  lease_until: Date;
  ended_by: string | null;
  end_body: string | null;
}

/** A claim's new attempt: sent with the task's UPDATE and the COMMIT (worker.ts claimQueued). */
export function insertAttemptStatement(a: {
  id: string;
  taskId: string;
  number: number;
  now: Date;
  leaseUntil: Date;
}): Statement {
  return {
    sql: "INSERT INTO task_attempts (id, task_id, number, started_at, lease_until) VALUES (?, ?, ?, ?, ?)",
    params: [a.id, a.taskId, a.number, a.now, a.leaseUntil],
  };
}

/**
 * Records how an attempt ended: by a worker call (with its canonical body) or by the
 * system. Deferred (tx.ts): nothing reads its result; it travels with the task's UPDATE.
 */
export function endAttempt(tx: Tx, id: string, endedBy: string, body: string | null, now: Date): Promise<void> {
  return defer(tx, endAttemptStatement(id, endedBy, body, now));
}

export function endAttemptStatement(id: string, endedBy: string, body: string | null, now: Date): Statement {
  return {
    sql: "UPDATE task_attempts SET ended_at = ?, ended_by = ?, end_body = ? WHERE id = ? AND ended_at IS NULL",
    params: [now, endedBy, body, id],
  };
}

export interface AttemptWithTask {
  attempt: AttemptRow;
  task: TaskRow;
}

/**
 * Takes attempt ids; the two statements that read each attempt with its task, both
 * locked (a batch of completions, worker.ts: a completion serialises on its task), sent
 * in one round trip, the tasks locked first.
 *
 * Why tasks first: cancel (tasks.ts) and the attempt expiry (worker.ts) lock the task and
 * then update its attempt. One statement joining attempts to tasks would lock each attempt
 * and then its task, the other way round, so a cancel and a completion of one task could
 * each hold one row and wait for the other: a deadlock (test/api/tasks.test.ts holds
 * the case). So every writer of an attempt takes its task first (cancel, expiry, claim,
 * completion), and a batch takes its tasks in id order: none waits for a row while
 * holding a later one.
 */
export function attemptsWithTasksStatements(attemptIds: readonly string[]): Statement[] {
  return [lockTasksOfAttemptsStatement(attemptIds), attemptsWithTasksStatement(attemptIds)];
}

/** attemptsWithTasksStatements' results, in order: each attempt with its task, by attempt id. */
export function attemptsWithTasksFrom([, rows]: readonly RowDataPacket[][]): Map<string, AttemptWithTask> {
  const found = new Map<string, AttemptWithTask>();
  for (const r of rows!) {
    const attempt: AttemptRow = {
      id: r.a_id,
      task_id: r.a_task_id,
      number: r.a_number,
      lease_until: r.a_lease_until,
      ended_by: r.a_ended_by,
      end_body: r.a_end_body,
    };
    const { a_id: _1, a_task_id: _2, a_number: _3, a_lease_until: _4, a_ended_by: _5, a_end_body: _6, ...task } = r;
    found.set(attempt.id, { attempt, task: task as TaskRow });
  }
  return found;
}

/**
 * Takes attempt ids; locks their tasks in task id order, and not the attempts. The
 * attempts are read in a derived table first (LIMIT keeps it from being merged into the
 * locking join, where its rows would be locked too; STRAIGHT_JOIN keeps it first), then
 * each task by primary key. As `t.id IN (SELECT …)`, MariaDB's optimiser may scan the
 * whole primary key of a small tasks table, locking unrelated tasks.
 */
function lockTasksOfAttemptsStatement(attemptIds: readonly string[]): Statement {
  return {
    sql: `SELECT STRAIGHT_JOIN t.id
            FROM (SELECT a.task_id FROM task_attempts a FORCE INDEX (PRIMARY) WHERE a.id IN (?) ORDER BY a.task_id LIMIT ?) d
            JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = d.task_id
           FOR UPDATE`,
    params: [attemptIds, attemptIds.length],
  };
}

/**
 * Takes attempt ids; returns each attempt with its task, locked (their tasks are locked
 * already). By primary key only: on a small table the optimiser may prefer a scan for an
 * IN list, and a locking scan would lock every attempt.
 */
function attemptsWithTasksStatement(attemptIds: readonly string[]): Statement {
  return {
    sql: `SELECT STRAIGHT_JOIN a.id AS a_id, a.task_id AS a_task_id, a.number AS a_number, a.lease_until AS a_lease_until,
            a.ended_by AS a_ended_by, a.end_body AS a_end_body,
            ${TASK_COLUMNS.split(",")
              .map((c) => `t.${c.trim()}`)
              .join(", ")}
       FROM task_attempts a FORCE INDEX (PRIMARY) JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = a.task_id
      WHERE a.id IN (?) FOR UPDATE`,
    params: [attemptIds],
  };
}

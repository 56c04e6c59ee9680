// The worker side (docs/tasks.md): claim, complete, requeue, and the recovery of attempts
// whose lease ran out. An attempt is stale once its task left RUNNING under it; the
// identical call that ended it may be repeated (200, nothing written), anything else on
// a stale attempt is 409 STATE_CONFLICT.
import type { components } from "../../generated/http/openapi-types.js";
import type { ResultSetHeader, RowDataPacket } from "mysql2/promise";
import type { Pool, Tx } from "../db/types.js";
import { commitAll, queryAll, withTransaction, type Statement } from "../db/tx.js";
import {
  attemptsWithTasksFrom,
  attemptsWithTasksStatements,
  endAttempt,
  endAttemptStatement,
  expiredStatement,
  insertAttemptStatement,
  nextQueuedStatement,
  selectExpired,
  selectNextQueued,
  selectTask,
  type AttemptWithTask,
  type TaskRow,
} from "../db/queries/tasks.js";
import {
  activeCredentialsStatement,
  activeIn,
  credentialRevocationStatement,
  revokedIn,
} from "../db/queries/identity.js";
import { OrbitError, notFound, stateConflict, unauthenticated, unavailable } from "../wire/errors.js";
import { formatTimestamp } from "../wire/time.js";
import { newId, type Caller } from "./identity.js";
import { nowMs } from "../clock.js";
import { moveTask, planMove, toWireTask, type Transition } from "./task-state.js";
import { inScope } from "./tasks.js";

/** A worker's claim, as the contract defines it (openapi.yaml, generated). */
export type ClaimResult = components["schemas"]["ClaimResult"];

/** How many expired attempts one claim or sweep transaction recovers at most. */
const EXPIRE_BATCH = 32;

/**
 * Recovers attempts whose lease ran out: back to QUEUED (task.requeued, LEASE_EXPIRED)
 * while the task has attempts left, else FAILED (task.failed, ATTEMPTS_EXHAUSTED), both
 * with effect_uncertain=true — the attempt may have had its effect.
 */
export async function expireAttempts(tx: Tx, now: Date, effects: ExpiryEffects, queueId?: string): Promise<void> {
  await expireTasks(tx, await selectExpired(tx, now, EXPIRE_BATCH, queueId), now, effects);
}

/** The same for tasks found expired and locked already (expiredStatement). */
async function expireTasks(tx: Tx, ids: readonly string[], now: Date, effects: ExpiryEffects): Promise<void> {
  for (const id of ids) {
    const task = (await selectTask(tx, id, true))!;
    if (task.current_attempt_id) await endAttempt(tx, task.current_attempt_id, "expired", null, now);
    const moved = await moveTask(tx, task, expiry(task, now));
    if (moved.appended) effects.namespaces.add(task.namespace_id);
    if (moved.task.state === "QUEUED") effects.queues.add(task.queue_id);
  }
}

/**
 * Whether a RUNNING task's attempt lease ran out by `now`, the clock of the node that
 * decides (docs/operations.md, "Clocks"): only once `now` is past `lease_until`, the instant itself
 * still leased — the rule of selectExpired (`lease_until < ?`), so that a worker's call
 * and the sweep never disagree about one attempt.
 */
function leaseRanOut(task: TaskRow, now: Date): boolean {
  return task.state === "RUNNING" && task.lease_until !== null && task.lease_until.getTime() < now.getTime();
}

/** The move of an expired attempt's task: what the sweep writes, and a late worker call too. */
function expiry(task: TaskRow, now: Date): Transition {
  const retry = task.attempts < task.max_attempts;
  return {
    to: retry ? "QUEUED" : "FAILED",
    reason: retry ? "LEASE_EXPIRED" : "ATTEMPTS_EXHAUSTED",
    effectUncertain: true,
    currentAttemptId: null,
    leaseUntil: null,
    ...(task.current_attempt_id ? { eventAttemptId: task.current_attempt_id } : {}),
    now,
  };
}

export interface ExpiryEffects {
  readonly namespaces: Set<string>;
  readonly queues: Set<string>;
}

export const noEffects = (): ExpiryEffects => ({ namespaces: new Set(), queues: new Set() });

/**
 * One claim attempt: recover expired attempts of the queue, then take its oldest QUEUED
 * tasks, at most `maxTasks` (1 for claimTask, up to 32 for claimTasks), each RUNNING under
 * an attempt of its own; none when the queue has none. The caller was authenticated from
 * the node's memory (http/caller.ts REVOCATION_IN_TRANSACTION), or before an earlier
 * attempt of the same long-poll: its credential may have been revoked since, and a revoked
 * credential takes no task (docs/tasks.md: a revoked token is 401 UNAUTHENTICATED).
 *
 * 2 round trips whatever `maxTasks`: [START; the credential's revocation; the queue's
 * expired attempts and its oldest QUEUED tasks, all locked], [each attempt's INSERT and its
 * task's UPDATE, and COMMIT], not one per statement. A task an expiry requeues goes to the
 * back of the queue, so the tasks read first are still the oldest; only when they were
 * fewer than asked is the queue read again, after the expiry (the rows this transaction
 * locked come back in it: SKIP LOCKED skips only others' locks).
 */
export async function claimQueued(
  pool: Pool,
  caller: Caller,
  queueId: string,
  maxTasks: number,
  workerLeaseMs: number,
  effects: ExpiryEffects,
  signal?: AbortSignal,
): Promise<ClaimResult[]> {
  return withTransaction(
    pool,
    async (tx) => {
      const now = nowMs();
      const [revocation, expired, next] = (await queryAll(tx, [
        credentialRevocationStatement(caller.credentialId),
        expiredStatement(now, EXPIRE_BATCH, queueId),
        nextQueuedStatement(queueId, maxTasks),
      ])) as [RowDataPacket[], RowDataPacket[], (TaskRow & RowDataPacket)[]];
      if (revokedIn(revocation)) throw new OrbitError("UNAUTHENTICATED", "the credential was revoked");
      let tasks: TaskRow[] = next;
      if (expired.length > 0) {
        await expireTasks(
          tx,
          expired.map((r) => r.id as string),
          now,
          effects,
        );
        if (tasks.length < maxTasks) tasks = await selectNextQueued(tx, queueId, maxTasks);
      }
      tasks = tasks.filter((t) => t.namespace_id === caller.namespaceId);
      if (tasks.length === 0) return [];
      const leaseUntil = new Date(now.getTime() + workerLeaseMs);
      const writes: Statement[] = [];
      const claims = tasks.map((task): ClaimResult => {
        const attemptId = newId();
        const moved = planMove(task, {
          to: "RUNNING",
          effectUncertain: false,
          attempts: task.attempts + 1,
          currentAttemptId: attemptId,
          leaseUntil,
          now,
        });
        writes.push(
          insertAttemptStatement({ id: attemptId, taskId: task.id, number: task.attempts + 1, now, leaseUntil }),
          ...moved.writes,
        );
        return { task: toWireTask(moved.task), attempt_id: attemptId, lease_until: formatTimestamp(leaseUntil) };
      });
      // Checked here, as withTransaction checks before its own COMMIT: a claim whose
      // deadline passed or whose client left rolls back.
      if (signal?.aborted) throw unavailable();
      const written = (await commitAll(tx, writes)) as ResultSetHeader[];
      // The tasks are locked by this transaction: each guarded UPDATE changes exactly its row.
      if (written.some((r) => r.affectedRows !== 1)) throw new Error("a claimed task changed under its lock");
      return claims;
    },
    signal,
    // Concurrent claimers of one queue: READ COMMITTED takes no gap locks, so claims that
    // skip each other's rows (SKIP LOCKED) do not deadlock on the index around them.
    "READ COMMITTED",
  );
}

/**
 * Runs the expiry sweep once across all queues (every node does, every second). READ
 * COMMITTED, as a claim's own recovery: under REPEATABLE READ its scan of tasks_lease
 * (state, lease_until) would next-key lock the gap in front of the first RUNNING entry,
 * where every new task's (QUEUED, NULL, newest id) entry goes, so each submit would wait
 * on each node's sweep until it committed (and a claim too, when no task is RUNNING).
 */
export async function expireDue(pool: Pool): Promise<ExpiryEffects> {
  const effects = noEffects();
  await withTransaction(pool, (tx) => expireAttempts(tx, nowMs(), effects), undefined, "READ COMMITTED");
  return effects;
}

export type AttemptCall =
  { kind: "complete"; outcome: "succeeded" | "failed" | "needs_review"; resultText?: string } | { kind: "requeue" };

const OUTCOMES = {
  succeeded: { to: "SUCCEEDED", reason: "WORKER_SUCCEEDED" },
  failed: { to: "FAILED", reason: "WORKER_FAILED" },
  needs_review: { to: "NEEDS_REVIEW", reason: "WORKER_NEEDS_REVIEW" },
} as const;

/** The worker's call and its canonical body, which identifies the call for the idempotent repeat. */
export interface AttemptRequest {
  readonly call: AttemptCall;
  readonly canonicalBody: string;
}

/** A worker call on one attempt, by a caller. */
export interface AttemptCallInput {
  readonly caller: Caller;
  readonly attemptId: string;
  /** Throws the body's error (400): called only after the scope check, so that 404 comes first; then the state (409). */
  readonly request: () => AttemptRequest;
}

/**
 * What a call came to: its task after it, or the error it answers (404, 400, 409). A 409
 * for a lease that ran out carries the task its expiry moved (`expired`): that write is
 * committed with the batch, and the sequencer and the queue's claims hear of it.
 */
export type AttemptCallOutcome =
  | { readonly task: TaskRow; readonly appended: boolean; readonly error?: undefined }
  | { readonly error: OrbitError; readonly expired?: TaskRow };

/**
 * Ends attempts by workers' calls in one transaction (a batch, attempt-batches.ts, or a
 * single call): one round trip that reads which callers' credentials are active, locks
 * every task and then reads every attempt with its task, locked (tasks first, as cancel
 * and expiry: attemptsWithTasksStatements); then each call decided in order — a call
 * whose credential was revoked is 401 (its request authenticated from the node's memory,
 * http/caller.ts REVOCATION_IN_TRANSACTION; this is its revocation check) — a call that fails (404, 400, 409) writes nothing but the expiry
 * of a lease that ran out (decideAttemptCall), and a later call on the same attempt sees
 * an earlier one's effect, as it would after its commit; then every
 * write and COMMIT in one round trip: 2 round trips in all (3 with COMMIT apart; one
 * fewer wake-up of each side per batch, bench/README.md). `beforeCommit` throws to roll
 * back instead (a member's deadline passed); after the writes nothing may throw for a
 * retry — the transaction committed with them (tx.ts commitAll).
 */
export async function endAttemptCalls(
  tx: Tx,
  inputs: readonly AttemptCallInput[],
  beforeCommit: () => void,
): Promise<AttemptCallOutcome[]> {
  const credentialIds = [...new Set(inputs.map((i) => i.caller.credentialId))];
  const [credentialRows, ...attemptRows] = (await queryAll(tx, [
    activeCredentialsStatement(credentialIds),
    ...attemptsWithTasksStatements([...new Set(inputs.map((i) => i.attemptId))]),
  ])) as RowDataPacket[][];
  const active = activeIn(credentialRows!);
  const found = attemptsWithTasksFrom(attemptRows);
  const writes: Statement[] = [];
  const outcomes = inputs.map((input): AttemptCallOutcome => {
    try {
      if (!active.has(input.caller.credentialId)) throw unauthenticated();
      const decided = decideAttemptCall(found.get(input.attemptId), input);
      found.set(input.attemptId, decided.after);
      writes.push(...decided.writes);
      if (decided.expired)
        return { error: stateConflict("the attempt is stale: its lease ran out"), expired: decided.after.task };
      return { task: decided.after.task, appended: decided.appended };
    } catch (e) {
      if (e instanceof OrbitError) return { error: e };
      throw e;
    }
  });
  beforeCommit();
  if (writes.length > 0) {
    const results = (await commitAll(tx, writes)) as ResultSetHeader[];
    // Every row written is locked by this transaction, so each write changes exactly its
    // row. Were one not to (it cannot, under the lock), the call fails after its commit;
    // a batch's members then each run again alone and find their attempts as committed.
    if (results.some((r) => r.affectedRows !== 1)) throw new Error("a locked attempt or task changed under its lock");
  }
  return outcomes;
}

/**
 * One call against its attempt and task as this transaction sees them. A stale attempt
 * (its task left RUNNING under it) takes only the identical repeat of the call that
 * ended it: 200 again, nothing written. An attempt whose lease ran out but that no sweep
 * or claim recovered yet (the sweep runs once a second) is expired here, exactly as the
 * sweep would (docs/tasks.md: a lease that runs out requeues or fails the task), and the
 * call is 409: otherwise it could still complete the attempt until the next sweep.
 */
function decideAttemptCall(found: AttemptWithTask | undefined, input: AttemptCallInput) {
  if (!found) throw notFound();
  inScope(input.caller, found.task);
  const { call, canonicalBody } = input.request();
  const { attempt, task } = found;
  if (task.state !== "RUNNING" || task.current_attempt_id !== input.attemptId) {
    if (attempt.ended_by === call.kind && attempt.end_body === canonicalBody)
      return { after: found, writes: [], appended: false };
    throw stateConflict("the attempt is stale: its task left RUNNING under it");
  }
  const now = nowMs();
  if (leaseRanOut(task, now)) {
    const moved = planMove(task, expiry(task, now));
    return {
      after: { attempt: { ...attempt, ended_by: "expired", end_body: null }, task: moved.task },
      writes: [endAttemptStatement(input.attemptId, "expired", null, now), ...moved.writes],
      appended: moved.appended,
      expired: true,
    };
  }
  // Two UPDATEs (attempt, then task), not one multi-table UPDATE: on MariaDB the joined
  // form saves a little node CPU but costs more database CPU, and the database is the
  // busier process.
  const moved =
    call.kind === "complete" ? complete(task, call, input.attemptId, now) : requeue(task, input.attemptId, now);
  return {
    after: { attempt: { ...attempt, ended_by: call.kind, end_body: canonicalBody }, task: moved.task },
    writes: [endAttemptStatement(input.attemptId, call.kind, canonicalBody, now), ...moved.writes],
    appended: moved.appended,
  };
}

function complete(task: TaskRow, call: Extract<AttemptCall, { kind: "complete" }>, attemptId: string, now: Date) {
  const o = OUTCOMES[call.outcome];
  return planMove(task, {
    to: o.to,
    reason: o.reason,
    effectUncertain: false,
    result: call.resultText ?? null,
    currentAttemptId: null,
    leaseUntil: null,
    eventAttemptId: attemptId,
    now,
  });
}

/** A safe retry: back to QUEUED, or FAILED when the task has used all its attempts. */
function requeue(task: TaskRow, attemptId: string, now: Date) {
  const retry = task.attempts < task.max_attempts;
  return planMove(task, {
    to: retry ? "QUEUED" : "FAILED",
    reason: retry ? "WORKER_REQUEUED" : "ATTEMPTS_EXHAUSTED",
    effectUncertain: false,
    currentAttemptId: null,
    leaseUntil: null,
    eventAttemptId: attemptId,
    now,
  });
}

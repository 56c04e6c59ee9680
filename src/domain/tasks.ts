// Task writes and reads of the task API (docs/tasks.md): submit, get, cancel, resolve.
// Each write is idempotent by its Idempotency-Key and runs in one transaction with the
// event it appends.
import type { Pool, Tx } from "../db/types.js";
import {
  endAttempt,
  newTaskRow,
  refusedSubmitCheck,
  selectTask,
  submitStatements,
  type TaskRow,
} from "../db/queries/tasks.js";
import { commitAll } from "../db/tx.js";
import { MAX_TASK_INPUT_BYTES, MAX_TASK_RESULT_BYTES } from "../config/limits.js";
import { invalidArgument, notFound, OrbitError, stateConflict, unauthenticated, unavailable } from "../wire/errors.js";
import { contentDigest, idempotent, replay, type Receipt } from "./idempotency.js";
import { newId, type Caller } from "./identity.js";
import { nowMs } from "../clock.js";
import { moveTask, toWireTask, type TaskWire } from "./task-state.js";

export const DEFAULT_TASK_MAX_ATTEMPTS = 5;

export interface TaskReceipt {
  task: TaskWire;
}

/** What a write did besides its receipt: whether the log has new events. */
export interface WriteEffects {
  appended: boolean;
}

/** A task visible to the caller: its queue is in the credential's scope. Else 404. */
export function inScope(caller: Caller, task: TaskRow | undefined): TaskRow {
  if (!task || task.namespace_id !== caller.namespaceId || !caller.queues.has(task.queue_id)) throw notFound();
  return task;
}

export function requireQueue(caller: Caller, queueId: string): void {
  if (!caller.queues.has(queueId)) throw notFound();
}

export async function getTask(pool: Pool, caller: Caller, id: string): Promise<TaskWire> {
  return toWireTask(inScope(caller, await selectTask(pool, id)));
}

export interface SubmitInput {
  readonly queueId: string;
  /** The exact JSON text of `input` as sent. */
  readonly inputText: string;
  readonly maxAttempts?: number;
  readonly key: string;
  readonly canonicalBody: string;
  /** The namespace has its maximum of QUEUED tasks (queued-quota.ts): only a replay is answered. */
  readonly full?: boolean;
}

/**
 * A result (completeAttempt, resolveTask) travels as a JSON string, escaped: sized so, at
 * most 256 KiB. Sized as sent, a 390 KiB result of `""` items would make a 780 KiB
 * event.deliver frame, which a client holding the contract's 512 KiB frame limit closes
 * with 1009: the event could never be received, only retried until EXPIRED.
 */
export function checkResultSize(resultText: string | undefined): void {
  if (resultText !== undefined && Buffer.byteLength(JSON.stringify(resultText)) > MAX_TASK_RESULT_BYTES) {
    throw invalidArgument("result exceeds 256 KiB as a JSON string (as task.result carries it)");
  }
}

/**
 * A new task in one round trip with its COMMIT (submitStatements): the caller's credential
 * was authenticated from the node's memory (http/caller.ts REVOCATION_IN_TRANSACTION), and
 * this transaction checks it is not revoked. A key taken already writes nothing and gets
 * its stored receipt (idempotency.ts), read after the COMMIT.
 */
export async function submitTask(
  tx: Tx,
  caller: Caller,
  s: SubmitInput,
  signal?: AbortSignal,
): Promise<Receipt<TaskReceipt>> {
  requireQueue(caller, s.queueId);
  // docs/tasks.md: 256 KiB, sized on the request's input as sent.
  if (Buffer.byteLength(s.inputText) > MAX_TASK_INPUT_BYTES) throw invalidArgument("input exceeds 256 KiB");
  const ref = { credentialId: caller.credentialId, operation: "tasks.submit", key: s.key };
  const digest = contentDigest(s.canonicalBody);
  if (s.full) {
    // The revocation check as a submit makes it; then a submit that landed before the
    // limit was reached still gets its receipt.
    const { active, landed } = await refusedSubmitCheck(tx, ref);
    if (!active) throw unauthenticated();
    if (landed) return replay(tx, ref, digest);
    throw new OrbitError("CAPACITY_EXCEEDED", "the namespace has its maximum of queued tasks", { "Retry-After": "1" });
  }
  const task = {
    id: newId(),
    namespaceId: caller.namespaceId,
    queueId: s.queueId,
    maxAttempts: s.maxAttempts ?? DEFAULT_TASK_MAX_ATTEMPTS,
    input: s.inputText,
    now: nowMs(),
  };
  const data: TaskReceipt = { task: toWireTask(newTaskRow(task)) };
  // Checked here, as withTransaction checks before its own COMMIT: a submit whose deadline
  // passed (its 503 answered already) writes nothing.
  if (signal?.aborted) throw unavailable();
  const [, checked, key] = (await commitAll(
    tx,
    submitStatements(task, { ref, digest, status: 201, receipt: JSON.stringify(data) }),
  )) as [unknown, { active: number | string }[], { affectedRows: number }];
  if (Number(checked[0]?.active) !== 1) throw unauthenticated();
  if (key.affectedRows === 1) return { status: 201, data, deduplicated: false };
  return replay(tx, ref, digest);
}

export interface CancelInput {
  readonly taskId: string;
  readonly expectedRevision: string;
  readonly key: string;
  readonly canonicalBody: string;
}

/** QUEUED or RUNNING → CANCELLED; effect_uncertain when it was RUNNING. */
export async function cancelTask(
  tx: Tx,
  caller: Caller,
  c: CancelInput,
  effects: WriteEffects,
): Promise<Receipt<TaskReceipt>> {
  const ref = { credentialId: caller.credentialId, operation: "tasks.cancel", key: c.key };
  return idempotent(tx, { ref, content: `${c.taskId}\n${c.canonicalBody}` }, async () => {
    const task = inScope(caller, await selectTask(tx, c.taskId, true));
    if (task.revision !== c.expectedRevision)
      throw stateConflict(`expected_revision is ${c.expectedRevision}, the task is at ${task.revision}`);
    if (task.state !== "QUEUED" && task.state !== "RUNNING")
      throw stateConflict(`a ${task.state} task cannot be cancelled`);
    const wasRunning = task.state === "RUNNING";
    const now = nowMs();
    if (wasRunning && task.current_attempt_id) await endAttempt(tx, task.current_attempt_id, "cancelled", null, now);
    const moved = await moveTask(tx, task, {
      to: "CANCELLED",
      reason: "CANCEL_REQUESTED",
      effectUncertain: wasRunning,
      currentAttemptId: null,
      leaseUntil: null,
      ...(wasRunning && task.current_attempt_id ? { eventAttemptId: task.current_attempt_id } : {}),
      now,
    });
    effects.appended ||= moved.appended;
    return { status: 200, data: { task: toWireTask(moved.task) } };
  });
}

export interface ResolveInput {
  readonly taskId: string;
  readonly expectedRevision: string;
  readonly outcome: "succeeded" | "failed";
  /** Raw JSON text of `result`, when sent; otherwise the task keeps its result. */
  readonly resultText?: string;
  readonly key: string;
  readonly canonicalBody: string;
}

/** NEEDS_REVIEW → SUCCEEDED or FAILED: a second, distinct authoritative event. */
export async function resolveTask(
  tx: Tx,
  caller: Caller,
  r: ResolveInput,
  effects: WriteEffects,
): Promise<Receipt<TaskReceipt>> {
  const ref = { credentialId: caller.credentialId, operation: "tasks.resolve", key: r.key };
  return idempotent(tx, { ref, content: `${r.taskId}\n${r.canonicalBody}` }, async () => {
    const task = inScope(caller, await selectTask(tx, r.taskId, true));
    if (task.revision !== r.expectedRevision)
      throw stateConflict(`expected_revision is ${r.expectedRevision}, the task is at ${task.revision}`);
    if (task.state !== "NEEDS_REVIEW")
      throw stateConflict(`only a NEEDS_REVIEW task can be resolved; this one is ${task.state}`);
    const moved = await moveTask(tx, task, {
      to: r.outcome === "succeeded" ? "SUCCEEDED" : "FAILED",
      reason: r.outcome === "succeeded" ? "REVIEW_SUCCEEDED" : "REVIEW_FAILED",
      effectUncertain: false,
      ...(r.resultText !== undefined ? { result: r.resultText } : {}),
      currentAttemptId: null,
      leaseUntil: null,
      now: nowMs(),
    });
    effects.appended ||= moved.appended;
    return { status: 200, data: { task: toWireTask(moved.task) } };
  });
}

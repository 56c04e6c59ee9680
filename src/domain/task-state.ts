// The task state machine (docs/tasks.md §5): one function moves a
// locked task row and, for results and requeues, appends the event in the same
// transaction. Every state change bumps the revision.
import type { ResultSetHeader } from "mysql2/promise";
import type { components } from "../../generated/http/openapi-types.js";
import type { Tx } from "../db/types.js";
import { defer, type Statement } from "../db/tx.js";
import { updateTaskStatement, type TaskRow, type TaskState } from "../db/queries/tasks.js";
import { formatTimestamp } from "../wire/time.js";
import { appendEventStatement, type EventType, type Snapshot } from "./result-log.js";

/** Why a transition happened: details.reason of its event (openapi.yaml lists them). */
export type TransitionReason =
  | "WORKER_SUCCEEDED"
  | "WORKER_FAILED"
  | "WORKER_NEEDS_REVIEW"
  | "CANCEL_REQUESTED"
  | "REVIEW_SUCCEEDED"
  | "REVIEW_FAILED"
  | "WORKER_REQUEUED"
  | "LEASE_EXPIRED"
  | "ATTEMPTS_EXHAUSTED";

const EVENT_TYPES: Partial<Record<TaskState, EventType>> = {
  SUCCEEDED: "task.succeeded",
  FAILED: "task.failed",
  CANCELLED: "task.cancelled",
  NEEDS_REVIEW: "task.needs_review",
  QUEUED: "task.requeued",
};

export interface Transition {
  readonly to: TaskState;
  /** Set for transitions that append an event: results and requeues. */
  readonly reason?: TransitionReason;
  readonly effectUncertain: boolean;
  /** Raw JSON text; undefined keeps the task's current result. */
  readonly result?: string | null;
  readonly attempts?: number;
  readonly currentAttemptId: string | null;
  readonly leaseUntil: Date | null;
  /** The attempt the event's snapshot names, if any. */
  readonly eventAttemptId?: string;
  readonly now: Date;
}

export interface Moved {
  readonly task: TaskRow;
  /** True when an event was appended (the namespace's sequencer has work). */
  readonly appended: boolean;
}

/** Moves a task that the caller holds locked (FOR UPDATE) at `task.revision`. */
export async function moveTask(tx: Tx, task: TaskRow, t: Transition): Promise<Moved> {
  const plan = planMove(task, t);
  const [update, event] = plan.writes;
  const [res] = await tx.query<ResultSetHeader>(update!.sql, [...update!.params]);
  // The row is locked by the caller, so the revision cannot have moved.
  if (res.affectedRows !== 1) throw new Error(`task ${task.id} changed under its lock`);
  if (event) await defer(tx, event);
  return { task: plan.task, appended: plan.appended };
}

/**
 * What moving a locked task comes to, without sending anything: the moved row and its
 * writes — the task's UPDATE (guarded by the revision), then the event's INSERT for
 * results and requeues. Each write changes exactly one row.
 */
export function planMove(task: TaskRow, t: Transition): Moved & { writes: Statement[] } {
  const update = updateTaskStatement(task.id, task.revision, {
    state: t.to,
    effectUncertain: t.effectUncertain,
    currentAttemptId: t.currentAttemptId,
    leaseUntil: t.leaseUntil,
    now: t.now,
    ...(t.attempts !== undefined ? { attempts: t.attempts } : {}),
    ...(t.result !== undefined ? { result: t.result } : {}),
    ...(t.to === "QUEUED" ? { queuedAt: t.now } : {}),
  });
  const moved: TaskRow = {
    ...task,
    state: t.to,
    revision: (BigInt(task.revision) + 1n).toString(),
    effect_uncertain: t.effectUncertain ? 1 : 0,
    current_attempt_id: t.currentAttemptId,
    lease_until: t.leaseUntil,
    updated_at: t.now,
    ...(t.attempts !== undefined ? { attempts: t.attempts } : {}),
    ...(t.result !== undefined ? { result: t.result } : {}),
  };
  const type = EVENT_TYPES[t.to];
  if (!t.reason || !type) return { task: moved, appended: false, writes: [update] };
  const snapshot: Snapshot = {
    schema_version: 1,
    task_id: moved.id,
    queue_id: moved.queue_id,
    state: moved.state,
    revision: moved.revision,
    effect_uncertain: t.effectUncertain,
    ...(moved.result !== null && t.to !== "QUEUED" ? { result: moved.result } : {}),
    ...(t.eventAttemptId ? { current_attempt_id: t.eventAttemptId } : {}),
  };
  const event = appendEventStatement({
    namespaceId: moved.namespace_id,
    queueId: moved.queue_id,
    type,
    taskId: moved.id,
    taskRevision: moved.revision,
    occurredAt: t.now,
    details: { state: moved.state, reason: t.reason },
    snapshot,
  });
  return { task: moved, appended: true, writes: [update, event] };
}

/** The wire Task of docs/tasks.md §4, as the contract defines it (openapi.yaml, generated). */
export type TaskWire = components["schemas"]["Task"];

export function toWireTask(t: TaskRow): TaskWire {
  return {
    id: t.id,
    queue_id: t.queue_id,
    state: t.state,
    revision: t.revision,
    attempts: t.attempts,
    created_at: formatTimestamp(t.created_at),
    updated_at: formatTimestamp(t.updated_at),
    ...(t.result !== null ? { result: t.result } : {}),
  };
}

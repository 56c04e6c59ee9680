// HTTP handlers of the worker API (docs/tasks.md). Worker calls take no Idempotency-Key:
// completing an attempt is idempotent by its attempt id and body.
import type { Handler } from "../../../generated/http/routes.js";
import { POLL_INTERVAL_MS } from "../../domain/queue-signals.js";
import { afterCommit } from "../../domain/services.js";
import { checkResultSize } from "../../domain/tasks.js";
import type { TaskWire } from "../../domain/task-state.js";
import {
  claimQueued,
  noEffects,
  type AttemptCall,
  type AttemptRequest,
  type ClaimResult,
} from "../../domain/worker.js";
import type { Caller } from "../../domain/identity.js";
import type { HandlerContext } from "../router.js";
import { bodyOfQueueInScope } from "./queue-scope.js";

/**
 * Long-poll: claim at once; if the queue is empty, wait for a wake-up from this node or
 * the poll interval, and claim again, until wait_ms has passed (then 204). A client that
 * went away ends the wait and takes no task: otherwise its claim would go on polling for
 * the rest of wait_ms and take the next task for nobody — RUNNING until its lease runs
 * out, then back with an attempt used and effect_uncertain=true (FAILED at max_attempts 1).
 * A claim whose client leaves during its transaction rolls back (checked before COMMIT, as
 * the deadline is: a COMMIT already sent still lands, and that task waits for its lease).
 * Answers as soon as one claim took any task: a batch claim does not wait to fill up.
 */
async function longPoll(
  ctx: HandlerContext,
  caller: Caller,
  body: { queue_id: string; wait_ms?: number },
  maxTasks: number,
): Promise<ClaimResult[]> {
  // A monotonic clock: a wall-clock step (NTP) must not stretch or cut the wait.
  const deadline = performance.now() + (body.wait_ms ?? 0);
  const { queueSignals, workerLeaseMs } = ctx.services;
  const signal = AbortSignal.any([ctx.signal, ctx.clientGone]);
  // Each claim's transaction checks that the credential is not revoked: the request
  // authenticated from the node's memory, and a long poll may outlive a revocation.
  for (;;) {
    if (ctx.clientGone.aborted) return [];
    const effects = noEffects();
    const claimed = await claimQueued(ctx.pool, caller, body.queue_id, maxTasks, workerLeaseMs, effects, signal);
    afterCommit(
      ctx.services,
      effects.namespaces,
      [...effects.queues].filter((q) => q !== body.queue_id || claimed.length === 0),
    );
    if (claimed.length > 0) return claimed;
    const left = deadline - performance.now();
    if (left <= 0 || queueSignals.isClosed || signal.aborted) return [];
    await queueSignals.wait(body.queue_id, Math.min(left, POLL_INTERVAL_MS), signal);
  }
}

export const claimTask: Handler<"claimTask", HandlerContext> = async (req, ctx) => {
  const { body, caller } = await bodyOfQueueInScope(req, ctx);
  const [claimed] = await longPoll(ctx, caller, body, 1);
  return claimed ? { status: 200, data: claimed } : { status: 204 };
};

/** claimTask for up to max_tasks tasks, in one transaction per poll (docs/tasks.md §6). */
export const claimTasks: Handler<"claimTasks", HandlerContext> = async (req, ctx) => {
  const { body, caller } = await bodyOfQueueInScope(req, ctx);
  const claims = await longPoll(ctx, caller, body, body.max_tasks);
  return claims.length > 0 ? { status: 200, data: { claims } } : { status: 204 };
};

/**
 * Reads and validates the body now but keeps its error (400, 413, 415) for later: the
 * order of checks puts 404 first, and the attempt's scope is checked by the locked
 * SELECT inside the transaction. This saves an unlocked SELECT of the scope before
 * reading the body: one statement per completion.
 */
async function readDeferred(read: () => Promise<AttemptRequest>): Promise<() => AttemptRequest> {
  try {
    const request = await read();
    return () => request;
  } catch (e) {
    return () => {
      throw e;
    };
  }
}

/** Ends the attempt by the worker's call: committed alone or with other calls (attempt-batches.ts). */
async function endAttempt(
  ctx: HandlerContext,
  attemptId: string,
  request: () => AttemptRequest,
): Promise<{ task: TaskWire }> {
  return { task: await ctx.services.attempts.run({ caller: ctx.caller(), attemptId, request }, ctx.signal) };
}

export const completeAttempt: Handler<"completeAttempt", HandlerContext> = async (req, ctx) => {
  const request = await readDeferred(async () => {
    const body = await req.body();
    const resultText = req.rawField("result");
    checkResultSize(resultText);
    const call: AttemptCall = {
      kind: "complete",
      outcome: body.outcome,
      ...(resultText !== undefined ? { resultText } : {}),
    };
    return { call, canonicalBody: req.canonicalBody() };
  });
  return { status: 200, data: await endAttempt(ctx, req.path.attempt_id, request) };
};

export const requeueAttempt: Handler<"requeueAttempt", HandlerContext> = async (req, ctx) => {
  const request = await readDeferred(async () => {
    await req.body();
    return { call: { kind: "requeue" }, canonicalBody: req.canonicalBody() };
  });
  return { status: 200, data: await endAttempt(ctx, req.path.attempt_id, request) };
};

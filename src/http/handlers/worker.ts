// HTTP handlers of the worker API (platform.md). Worker calls take no Idempotency-Key:
// completing an attempt is idempotent by its attempt id and body.
import type { Handler } from "../../../generated/http/routes.js";
import { withTransaction } from "../../db/tx.js";
import { selectAttemptWithTask } from "../../db/queries/tasks.js";
import { POLL_INTERVAL_MS } from "../../domain/queue-signals.js";
import { afterCommit } from "../../domain/services.js";
import { inScope, requireQueue, type WriteEffects } from "../../domain/tasks.js";
import { claimOnce, endAttemptCall, noEffects, type AttemptCall } from "../../domain/worker.js";
import type { Caller } from "../../domain/identity.js";
import { notFound } from "../../wire/errors.js";
import type { HandlerContext } from "../router.js";

/**
 * Long-poll: claim at once; if the queue is empty, wait for a wake-up from this node or
 * the poll interval, and claim again, until wait_ms has passed (then 204).
 */
export const claimTask: Handler<"claimTask", HandlerContext> = async (req, ctx) => {
  const caller = ctx.caller();
  const body = await req.body();
  requireQueue(caller, body.queue_id);
  const deadline = Date.now() + (body.wait_ms ?? 0);
  const { queueSignals, workerLeaseMs } = ctx.services;
  for (;;) {
    const effects = noEffects();
    const claimed = await claimOnce(ctx.pool, caller, body.queue_id, workerLeaseMs, effects, ctx.signal);
    afterCommit(ctx.services, effects.namespaces, [...effects.queues].filter((q) => q !== body.queue_id || !claimed));
    if (claimed) return { status: 200, data: claimed };
    const left = deadline - Date.now();
    if (left <= 0 || queueSignals.isClosed || ctx.signal.aborted) return { status: 204 };
    await queueSignals.wait(body.queue_id, Math.min(left, POLL_INTERVAL_MS), ctx.signal);
  }
};

/** The attempt must exist and belong to a task in the caller's scope (404 otherwise). */
async function attemptInScope(ctx: HandlerContext, caller: Caller, attemptId: string): Promise<void> {
  const found = await selectAttemptWithTask(ctx.pool, attemptId);
  if (!found) throw notFound();
  inScope(caller, found.task);
}

async function endAttempt(ctx: HandlerContext, attemptId: string, call: AttemptCall, canonicalBody: string) {
  const caller = ctx.caller();
  const effects: WriteEffects = { appended: false };
  const out = await withTransaction(ctx.pool, (tx) => endAttemptCall(tx, caller, attemptId, call, canonicalBody, effects), ctx.signal);
  afterCommit(ctx.services, effects.appended ? [caller.namespaceId] : [], effects.requeuedQueue ? [effects.requeuedQueue] : []);
  return out;
}

export const completeAttempt: Handler<"completeAttempt", HandlerContext> = async (req, ctx) => {
  await attemptInScope(ctx, ctx.caller(), req.path.attempt_id);
  const body = await req.body();
  const resultText = req.rawField("result");
  const call: AttemptCall = { kind: "complete", outcome: body.outcome, ...(resultText !== undefined ? { resultText } : {}) };
  return { status: 200, data: await endAttempt(ctx, req.path.attempt_id, call, req.canonicalBody()) };
};

export const requeueAttempt: Handler<"requeueAttempt", HandlerContext> = async (req, ctx) => {
  await attemptInScope(ctx, ctx.caller(), req.path.attempt_id);
  await req.body();
  return { status: 200, data: await endAttempt(ctx, req.path.attempt_id, { kind: "requeue" }, req.canonicalBody()) };
};

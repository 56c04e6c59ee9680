// HTTP handlers of the task API (docs/tasks.md): thin — scope, then input, then one
// domain call in one transaction; after the commit, the sequencer and claim wake-ups.
import type { Handler } from "../../../generated/http/routes.js";
import { answered, created, inTransaction } from "./receipts.js";
import { selectTask } from "../../db/queries/tasks.js";
import { afterCommit } from "../../domain/services.js";
import {
  cancelTask,
  checkResultSize,
  getTask as readTask,
  inScope,
  resolveTask,
  submitTask as submit,
  type WriteEffects,
} from "../../domain/tasks.js";
import type { HandlerContext } from "../router.js";
import { bodyOfQueueInScope } from "./queue-scope.js";

export const submitTask: Handler<"submitTask", HandlerContext> = async (req, ctx) => {
  // The queue named in the body is the scope (404), before the body and the key (400).
  const { body, caller } = await bodyOfQueueInScope(req, ctx);
  const key = req.idempotencyKey();
  const quota = ctx.services.queuedQuota;
  const reservation = quota ? await quota.reserve(caller.namespaceId) : undefined;
  let committed = false;
  try {
    const receipt = await inTransaction(ctx, (tx) =>
      submit(
        tx,
        caller,
        {
          full: quota !== undefined && reservation === undefined,
          queueId: body.queue_id,
          inputText: req.rawField("input")!,
          ...(body.max_attempts !== undefined ? { maxAttempts: body.max_attempts } : {}),
          key,
          canonicalBody: req.canonicalBody(),
        },
        ctx.signal,
      ),
    );
    committed = !receipt.deduplicated;
    // One new task: one waiting claim is woken for it.
    if (committed) ctx.services.queueSignals.notify(body.queue_id, 1);
    return created(receipt);
  } finally {
    reservation?.(committed);
  }
};

export const getTask: Handler<"getTask", HandlerContext> = async (req, ctx) => ({
  status: 200,
  data: await readTask(ctx.pool, ctx.caller(), req.path.id),
});

export const cancelTaskHandler: Handler<"cancelTask", HandlerContext> = async (req, ctx) => {
  const caller = ctx.caller();
  inScope(caller, await selectTask(ctx.pool, req.path.id));
  const body = await req.body();
  const key = req.idempotencyKey();
  const effects: WriteEffects = { appended: false };
  const receipt = await inTransaction(ctx, (tx) =>
    cancelTask(
      tx,
      caller,
      { taskId: req.path.id, expectedRevision: body.expected_revision, key, canonicalBody: req.canonicalBody() },
      effects,
    ),
  );
  if (effects.appended) afterCommit(ctx.services, [caller.namespaceId], []);
  return answered(receipt);
};

export const resolveTaskHandler: Handler<"resolveTask", HandlerContext> = async (req, ctx) => {
  const caller = ctx.caller();
  inScope(caller, await selectTask(ctx.pool, req.path.id));
  const body = await req.body();
  const key = req.idempotencyKey();
  const resultText = req.rawField("result");
  checkResultSize(resultText);
  const effects: WriteEffects = { appended: false };
  const receipt = await inTransaction(ctx, (tx) =>
    resolveTask(
      tx,
      caller,
      {
        taskId: req.path.id,
        expectedRevision: body.expected_revision,
        outcome: body.outcome,
        ...(resultText !== undefined ? { resultText } : {}),
        key,
        canonicalBody: req.canonicalBody(),
      },
      effects,
    ),
  );
  if (effects.appended) afterCommit(ctx.services, [caller.namespaceId], []);
  return answered(receipt);
};

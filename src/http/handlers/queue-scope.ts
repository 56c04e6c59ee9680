// The queue a body names is the resource of a submit, a worker's claim and a
// subscription's creation. The order of checks puts scope (404) before the body (400): an
// invalid body that names, well-formed, a queue outside the caller's scope is NOT_FOUND,
// as an invalid hello naming another's subscription is (ws/frames.ts helloSubscriptionId).
import type { HandlerRequest, OperationTypes } from "../../../generated/http/routes.js";
import { requireQueue } from "../../domain/tasks.js";
import type { Caller } from "../../domain/identity.js";
import { OrbitError } from "../../wire/errors.js";
import { wellFormedId } from "../../wire/ids.js";
import type { HandlerContext } from "../router.js";

type QueueBodied = "submitTask" | "claimTask" | "claimTasks" | "createSubscription";

/**
 * The request's body, once its queue is known to be in the caller's scope (404 first), and
 * the caller as it was checked: for an operation authenticated from the node's memory,
 * one looked up again when memory lacks the queue (HandlerContext.callerNow).
 */
export async function bodyOfQueueInScope<K extends QueueBodied>(
  req: HandlerRequest<K>,
  ctx: HandlerContext,
): Promise<{ body: OperationTypes[K]["body"]; caller: Caller }> {
  const scoped = async (queueId: string): Promise<Caller> => {
    const remembered = ctx.caller();
    if (remembered.queues.has(queueId)) return remembered;
    const now = await ctx.callerNow();
    requireQueue(now, queueId);
    return now;
  };
  let body;
  try {
    body = await req.body();
  } catch (e) {
    // The body parsed as JSON (its fields are known) but broke a rule: its queue, as sent
    // (rawField is the field's JSON text, which the strict parser accepted).
    const sent = req.rawField("queue_id");
    const queueId = sent === undefined ? undefined : wellFormedId(JSON.parse(sent));
    if (e instanceof OrbitError && e.code === "INVALID_ARGUMENT" && queueId !== undefined) await scoped(queueId);
    throw e;
  }
  return { body, caller: await scoped(body.queue_id) };
}

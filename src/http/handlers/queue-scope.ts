// The queue a body names is the resource of a submit, a worker's claim and a
// subscription's creation. The order of checks puts scope (404) before the body (400): an
// invalid body that names, well-formed, a queue outside the caller's scope is NOT_FOUND,
// as an invalid hello naming another's subscription is (ws/frames.ts helloSubscriptionId).
import type { HandlerRequest, OperationTypes } from "../../../generated/http/routes.js";
import { requireQueue } from "../../domain/tasks.js";
import type { Caller } from "../../domain/identity.js";
import { OrbitError } from "../../wire/errors.js";
import { wellFormedId } from "../../wire/ids.js";

type QueueBodied = "submitTask" | "claimTask" | "claimTasks" | "createSubscription";

/** The request's body, once its queue is known to be in the caller's scope (404 first). */
export async function bodyOfQueueInScope<K extends QueueBodied>(
  req: HandlerRequest<K>,
  caller: Caller,
): Promise<OperationTypes[K]["body"]> {
  let body;
  try {
    body = await req.body();
  } catch (e) {
    // The body parsed as JSON (its fields are known) but broke a rule: its queue, as sent
    // (rawField is the field's JSON text, which the strict parser accepted).
    const sent = req.rawField("queue_id");
    const queueId = sent === undefined ? undefined : wellFormedId(JSON.parse(sent));
    if (e instanceof OrbitError && e.code === "INVALID_ARGUMENT" && queueId !== undefined)
      requireQueue(caller, queueId);
    throw e;
  }
  requireQueue(caller, body.queue_id);
  return body;
}

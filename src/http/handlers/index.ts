// Every HTTP operation of the contract, each with its handler: the compiler refuses a
// missing one. Operations that later issues implement answer NOT_IMPLEMENTED (501) in
// the envelope — after authentication, the action check and full validation of the
// request, so that clients and tests see the final contract's 400s already.
import { ROUTES, type Handler, type HttpOperationId, type Implementation } from "../../../generated/http/routes.js";
import { notImplemented } from "../../wire/errors.js";
import type { HandlerContext } from "../router.js";
import { getCurrentCredential, getHealth } from "./operator.js";
import { cancelTaskHandler, getTask, resolveTaskHandler, submitTask } from "./tasks.js";
import { claimTask, completeAttempt, requeueAttempt } from "./worker.js";
import {
  configureSubscription, createSubscription, getEventDelivery, getSubscription, listEventDeliveries, listSubscriptions,
  retryEventDelivery,
} from "./subscriptions.js";

function later<K extends HttpOperationId>(operationId: K): Handler<K, HandlerContext> {
  const route = ROUTES.find((r) => r.operationId === operationId);
  return async (req) => {
    if (route?.idempotency === "required") req.idempotencyKey();
    if (route?.hasBody) await req.body();
    throw notImplemented();
  };
}

export const handlers: Implementation<HandlerContext> = {
  getHealth,
  getCurrentCredential,
  // Tasks and workers (platform.md).
  submitTask,
  getTask,
  cancelTask: cancelTaskHandler,
  resolveTask: resolveTaskHandler,
  claimTask,
  completeAttempt,
  requeueAttempt,
  // Subscription management (spec §1–4).
  createSubscription,
  listSubscriptions,
  getSubscription,
  configureSubscription,
  listEventDeliveries,
  getEventDelivery,
  retryEventDelivery,
};

// Every HTTP operation of the contract, each with its handler: the compiler refuses a
// missing one (generated Implementation type).
import type { Implementation } from "../../../generated/http/routes.js";
import type { HandlerContext } from "../router.js";
import { getCurrentCredential, getHealth, getLiveness, getMetrics, getReadiness } from "./operator.js";
import { getEventsSchema, getOpenapiDocument } from "./contract.js";
import { cancelTaskHandler, getTask, resolveTaskHandler, submitTask } from "./tasks.js";
import { claimTask, claimTasks, completeAttempt, requeueAttempt } from "./worker.js";
import { completeAttempts } from "./completions.js";
import {
  configureSubscription,
  createSubscription,
  getEventDelivery,
  getSubscription,
  listEventDeliveries,
  listSubscriptions,
  retryEventDelivery,
} from "./subscriptions.js";

export const handlers: Implementation<HandlerContext> = {
  // Operator endpoints (Orbit's choice): health, "who am I", the published contract.
  getHealth,
  getLiveness,
  getReadiness,
  getMetrics,
  getCurrentCredential,
  getOpenapiDocument,
  getEventsSchema,
  // Tasks and workers (docs/tasks.md).
  submitTask,
  getTask,
  cancelTask: cancelTaskHandler,
  resolveTask: resolveTaskHandler,
  claimTask,
  claimTasks,
  completeAttempt,
  completeAttempts,
  requeueAttempt,
  // Subscription management (docs/protocol.md §1–4).
  createSubscription,
  listSubscriptions,
  getSubscription,
  configureSubscription,
  listEventDeliveries,
  getEventDelivery,
  retryEventDelivery,
};

// HTTP handlers of subscription management (docs/protocol.md §2-4). Order of checks: scope (404),
// then the body (400), then idempotency and state (409) inside one transaction.
import type { Handler } from "../../../generated/http/routes.js";
import { answered, created, inTransaction } from "./receipts.js";
import { deliveryInScope, getDelivery, listDeliveries, retry } from "../../domain/deliveries.js";
import {
  configureSubscription as configure,
  createSubscription as create,
  getSubscription as readSubscription,
  listSubscriptions as list,
  toWireSubscription,
} from "../../domain/subscriptions.js";
import { bodyOfQueueInScope } from "./queue-scope.js";
import type { HandlerContext } from "../router.js";

export const createSubscription: Handler<"createSubscription", HandlerContext> = async (req, ctx) => {
  // The queue named in the body is the scope (404), before the body and the key (400).
  const { body, caller } = await bodyOfQueueInScope(req, ctx);
  const key = req.idempotencyKey();
  const receipt = await inTransaction(ctx, (tx) =>
    create(tx, caller, {
      name: body.name,
      queueId: body.queue_id,
      ...(body.types !== undefined ? { types: body.types } : {}),
      ...(body.from_sequence !== undefined ? { fromSequence: body.from_sequence } : {}),
      ...(body.max_pending !== undefined ? { maxPending: body.max_pending } : {}),
      ...(body.max_attempts !== undefined ? { maxAttempts: body.max_attempts } : {}),
      key,
      canonicalBody: req.canonicalBody(),
    }),
  );
  return created(receipt);
};

export const listSubscriptions: Handler<"listSubscriptions", HandlerContext> = async (req, ctx) => ({
  status: 200,
  data: await list(ctx.pool, ctx.caller(), {
    queueId: req.query.queue_id,
    ...(req.query.limit !== undefined ? { limit: req.query.limit } : {}),
    ...(req.query.cursor !== undefined ? { cursor: req.query.cursor } : {}),
  }),
});

export const getSubscription: Handler<"getSubscription", HandlerContext> = async (req, ctx) => ({
  status: 200,
  data: toWireSubscription(await readSubscription(ctx.pool, ctx.caller(), req.path.id)),
});

export const configureSubscription: Handler<"configureSubscription", HandlerContext> = async (req, ctx) => {
  const caller = ctx.caller();
  await readSubscription(ctx.pool, caller, req.path.id);
  const body = await req.body();
  const key = req.idempotencyKey();
  const receipt = await inTransaction(ctx, (tx) =>
    configure(tx, caller, {
      id: req.path.id,
      expectedRevision: body.expected_revision,
      enabled: body.enabled,
      reason: body.reason,
      key,
      canonicalBody: req.canonicalBody(),
    }),
  );
  // Committed: this node's connections of a resumed subscription claim now, not at their
  // next ping or recheck (subscription-signals.ts).
  if (receipt.data.subscription.enabled) ctx.services.subscriptionSignals.notify(req.path.id);
  return answered(receipt);
};

export const listEventDeliveries: Handler<"listEventDeliveries", HandlerContext> = async (req, ctx) => {
  const caller = ctx.caller();
  // The subscription's scope (404) before its query string (400).
  const s = await readSubscription(ctx.pool, caller, req.path.id);
  const q = req.query;
  return {
    status: 200,
    data: await listDeliveries(ctx.pool, caller, s, {
      ...(q.state !== undefined ? { state: q.state } : {}),
      ...(q.limit !== undefined ? { limit: q.limit } : {}),
      ...(q.cursor !== undefined ? { cursor: q.cursor } : {}),
    }),
  };
};

export const getEventDelivery: Handler<"getEventDelivery", HandlerContext> = async (req, ctx) => ({
  status: 200,
  data: await getDelivery(ctx.pool, ctx.caller(), req.path.id, req.path.delivery_id),
});

export const retryEventDelivery: Handler<"retryEventDelivery", HandlerContext> = async (req, ctx) => {
  const caller = ctx.caller();
  await deliveryInScope(ctx.pool, caller, req.path.id, req.path.delivery_id);
  const body = await req.body();
  const key = req.idempotencyKey();
  const receipt = await inTransaction(ctx, (tx) =>
    retry(tx, caller, {
      subscriptionId: req.path.id,
      deliveryId: req.path.delivery_id,
      expectedRevision: body.expected_revision,
      additionalAttempts: body.additional_attempts,
      reason: body.reason,
      key,
      canonicalBody: req.canonicalBody(),
    }),
  );
  // Committed: the delivery is PENDING again; this node's connections claim it now.
  ctx.services.subscriptionSignals.notify(req.path.id);
  return answered(receipt);
};

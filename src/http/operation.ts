// One operation's run, from the matched route to its answer: a slot of the connection,
// the deadline, who is calling, the input, the handler, and the checks of what it
// answered. The order of the checks is docs/protocol.md §1's.
import type { Context } from "koa";
import type { HandlerRequest, HttpOperationId, RouteSpec } from "../../generated/http/routes.js";
import { translateDbError } from "../db/tx.js";
import { isAction, type Caller } from "../domain/identity.js";
import { success } from "../wire/envelope.js";
import { protocolRequired } from "../wire/errors.js";
import { REVOCATION_IN_TRANSACTION, refuseIfRevoked, resolveCaller } from "./caller.js";
import { deadlineMs, withinDeadline } from "./deadline.js";
import { lazyInput, queueOfQueryInScope, readPath, readQuery, readShape } from "./input.js";
import type { HandlerContext, RouterDeps } from "./router.js";
import { takeSlot } from "./slots.js";

type AnyResult = { status: number; data?: unknown; raw?: string };

/**
 * The reason every request's `clientGone` is aborted with, once its response closed.
 * abort() without one makes a DOMException and captures its stack, on every request, a
 * cost the busiest path should not pay. Nothing reads the reason.
 */
const CLIENT_GONE = new Error("the response closed");

/** Runs the operation of `route` and writes its answer to `ctx`; a refusal throws. */
export async function runOperation(ctx: Context, route: RouteSpec, deps: RouterDeps): Promise<void> {
  ctx.state.operationId = route.operationId;
  const release = takeSlot(ctx, route);
  const controller = new AbortController();
  const work = execute(ctx, route, deps, controller.signal);
  // The slot is held until the work ends, also past the deadline's 503.
  work.then(release, release);
  const result = await withinDeadline(work, deadlineMs(route, deps.requestTimeoutMs), controller);
  ctx.status = result.status;
  if ("data" in result) ctx.body = success(ctx.state.requestId as string, result.data);
  if ("raw" in result && route.rawContentType) {
    ctx.type = route.rawContentType;
    ctx.body = result.raw;
  }
}

async function execute(ctx: Context, route: RouteSpec, deps: RouterDeps, signal: AbortSignal): Promise<AnyResult> {
  const remembered = REVOCATION_IN_TRANSACTION.has(route.operationId);
  const caller = await resolveCaller(ctx, route, deps.services.credentials, remembered);
  if (!remembered || !caller) return perform(ctx, route, deps, signal, caller);
  try {
    const callerNow = async () => (await resolveCaller(ctx, route, deps.services.credentials, false))!;
    return await perform(ctx, route, deps, signal, caller, callerNow);
  } catch (e) {
    await refuseIfRevoked(deps.services.credentials, caller, e);
    throw e;
  }
}

async function perform(
  ctx: Context,
  route: RouteSpec,
  deps: RouterDeps,
  signal: AbortSignal,
  caller: Caller | undefined,
  callerNow?: () => Promise<Caller>,
): Promise<AnyResult> {
  if (route.transport === "websocket") {
    readQuery(ctx, route);
    // A plain GET of the event endpoint: the caller may consume but did not upgrade.
    throw protocolRequired();
  }
  const path = readPath(ctx, route);
  const { query, refusal } = readShape(ctx, route);
  if (refusal) {
    // The target's scope (404) before validation (400): an operation on a target keeps
    // the 400 of its query string or unwanted body until its handler has checked that
    // target; one without a target (public, the caller's own credential) answers it now.
    if (!caller || !isAction(route.permission)) throw refusal;
    queueOfQueryInScope(ctx, route, caller);
  }
  const input = lazyInput(ctx, route, refusal);
  const handler = deps.handlers[route.operationId as HttpOperationId] as unknown as (
    req: HandlerRequest<HttpOperationId>,
    hctx: HandlerContext,
  ) => Promise<AnyResult>;
  const gone = new AbortController();
  // 'close' comes once the response is written or the connection closed: while the
  // handler still runs, nobody will read its answer (the client left, or the deadline's
  // 503 was written already).
  ctx.res.once("close", () => gone.abort(CLIENT_GONE));
  const hctx: HandlerContext = {
    pool: deps.pool,
    services: deps.services,
    requestId: ctx.state.requestId as string,
    signal,
    clientGone: gone.signal,
    caller() {
      if (!caller) throw new Error(`${route.operationId} has no caller`);
      return caller;
    },
    callerNow: async () => (callerNow ? callerNow() : hctx.caller()),
  };
  const request = {
    path,
    // Read by a handler after its scope check (listEventDeliveries) or as its scope (the
    // queue of listSubscriptions, checked above).
    get query() {
      if (refusal) throw refusal;
      return query;
    },
    ...input,
  };
  try {
    const result = await handler(request as unknown as HandlerRequest<HttpOperationId>, hctx);
    // A read whose target is in scope: its answer is the 400 it was owed.
    if (refusal) throw refusal;
    if (!route.successStatuses.includes(result.status))
      throw new Error(`${route.operationId} answered ${result.status}`);
    // An operation with a body must validate it; a handler that skipped that is a bug.
    if (route.hasBody && !input.wasRead()) throw new Error(`${route.operationId} never read its body`);
    if (route.idempotency === "required" && !input.keyWasRead())
      throw new Error(`${route.operationId} ignored its key`);
    return result;
  } catch (e) {
    throw translateDbError(e);
  }
}

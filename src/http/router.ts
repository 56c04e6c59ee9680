// Builds the @koa/router from the generated route table. Every operation runs the same
// pipeline, in the order of spec decision 5:
//   authenticate (401) → action (403) → path ids (404) → handler: scope (404) →
//   query string, body and Idempotency-Key, read on demand (400) → state (409)
// all inside the 8 s management deadline. (A worker's complete and requeue check the
// credential's revocation in their own transaction, and again before any refusal:
// REVOCATION_IN_TRANSACTION.) A handler never touches ctx: it returns
// {status, data} and this module writes the envelope.
import Router from "@koa/router";
import type { Context, Next } from "koa";
import { ROUTES, type HandlerRequest, type HttpOperationId, type Implementation, type RouteSpec } from "../../generated/http/routes.js";
import { authenticate, authenticateRemembered, requireAction, isAction, type Caller } from "../domain/identity.js";
import type { Pool } from "../db/types.js";
import { OrbitError, invalidArgument, notFound, protocolRequired, unauthenticated, unavailable } from "../wire/errors.js";
import { parseQuery } from "../wire/query.js";
import { wellFormedId } from "../wire/ids.js";
import { requireQueue } from "../domain/tasks.js";
import { canonicalJson } from "../wire/canonical.js";
import type { NodeServices } from "../domain/services.js";
import type { CredentialLookups } from "../domain/credential-lookups.js";
import { WireError } from "../wire/wire-error.js";
import { readJsonBody, requestHasBody } from "./body.js";
import { success } from "../wire/envelope.js";
import { check, validator } from "./validation.js";
import { translateDbError } from "../db/tx.js";
import { HTTP_REQUESTS_PER_CONNECTION, MAX_CLAIM_WAIT_MS } from "../config/limits.js";
import type { Socket } from "node:net";

/** What every handler gets besides its request. */
export interface HandlerContext {
  readonly pool: Pool;
  readonly services: NodeServices;
  readonly requestId: string;
  /** Aborted when the management deadline passes; transactions roll back instead of committing. */
  readonly signal: AbortSignal;
  /**
   * Aborted when the client's connection closed before the answer was written: nobody
   * will read it. Only a long-poll claim uses it (handlers/worker.ts); other operations
   * finish their short write, which a client repeats by its key or body.
   */
  readonly clientGone: AbortSignal;
  /** The authenticated caller; throws for the public operations, which have none. */
  caller(): Caller;
}

export interface RouterDeps {
  readonly pool: Pool;
  readonly services: NodeServices;
  readonly handlers: Implementation<HandlerContext>;
  readonly requestTimeoutMs: number;
}

/** Idempotency keys: 1–128 printable ASCII, no leading or trailing space (spec §2). */
const IDEMPOTENCY_KEY_RE = /^[\x21-\x7E](?:[\x20-\x7E]{0,126}[\x21-\x7E])?$/;

/**
 * After the router: a known path asked with a method it does not serve — any method,
 * OPTIONS and TRACE included — is 405 METHOD_NOT_ALLOWED with Allow, in the envelope
 * (requestContext). @koa/router's allowedMethods answers OPTIONS 200 with an empty
 * plain-text body and methods it does not know 501; Orbit serves no CORS preflight (its
 * clients are not browsers) and never answers 501 (openapi.yaml).
 */
export function methodNotAllowed() {
  return async function methodNotAllowedMiddleware(ctx: Context, next: Next): Promise<void> {
    await next();
    if (ctx.body != null || ctx.status !== 404) return;
    const allow = [...new Set(pathLayers(ctx).flatMap((l) => l.methods))];
    if (allow.length === 0) return;
    ctx.set("Allow", allow.join(", "));
    ctx.status = 405;
  };
}

type MatchedLayer = { readonly name?: string; readonly methods: string[] };

/** The operations on an action path (`/v1/tasks/{id}:cancel`): a path of its own, POST only. */
const ACTION_OPERATIONS: ReadonlySet<string> = new Set(
  (ROUTES as readonly RouteSpec[]).filter((r) => /\}:[a-z]+$/.test(r.path)).map((r) => r.operationId),
);

/**
 * The router's layers of the path asked, as openapi.yaml has it. An action path also fits
 * its resource's template, with "{id}:cancel" as the id (@koa/router's parameters take
 * any text but "/"): that reading is dropped, so that the action path has the action's
 * methods only, not the resource's GET and HEAD besides.
 */
function pathLayers(ctx: Context): readonly MatchedLayer[] {
  const layers = (ctx as Context & { matched?: MatchedLayer[] }).matched ?? [];
  const actions = layers.filter((l) => l.name !== undefined && ACTION_OPERATIONS.has(l.name));
  if (actions.length > 0) return actions;
  // An action no operation has (`/v1/tasks/{id}:retry`, `…:Cancel`) fits only the
  // resource's template, with "{id}:retry" as the id — never an id (32 hex): an unknown
  // path, 404 to every method. Read as the resource it was 405 with "Allow: HEAD, GET",
  // and a GET then 404.
  return ACTION_FORM.test(ctx.path) ? [] : layers;
}

/** A path whose last segment names an action after its id (`…/{id}:cancel`). */
const ACTION_FORM = /\/[^/]*:[^/]*$/;

/**
 * Whether the request is on another operation's action path, routed here only because its
 * template fits too (a GET of /v1/tasks/{id}:cancel reached getTask): such a request is
 * left unanswered for methodNotAllowed, which answers 405 with Allow: POST before
 * authentication, as on any known path asked with another method.
 */
function onAnotherActionPath(ctx: Context, route: RouteSpec): boolean {
  return !pathLayers(ctx).some((l) => l.name === route.operationId);
}

export function buildRouter(deps: RouterDeps): Router {
  // Paths match exactly, as openapi.yaml spells them: @koa/router's defaults would also
  // route case variants (/V1/TASKS) and a trailing slash to an operation, where the
  // contract has an unknown path (404).
  const router = new Router({ strict: true, sensitive: true });
  for (const route of ROUTES as readonly RouteSpec[]) {
    const method = route.method.toLowerCase() as "get" | "post";
    router[method](route.operationId, route.routerPath, async (ctx) => {
      if (!onAnotherActionPath(ctx, route)) await runOperation(ctx, route, deps);
    });
  }
  return router;
}

/** The operations that never wait for the database; openapi.yaml lists no 503 on them. */
const ANSWERED_AT_ONCE: ReadonlySet<string> = new Set(["getOpenapiDocument", "getEventsSchema", "getLiveness"]);

/** Operations of each connection whose work has not finished (a timed-out one's included). */
const inProcessing = new WeakMap<Socket, number>();

/**
 * A slot of the connection's HTTP_REQUESTS_PER_CONNECTION, or 503 with Connection: close.
 * Node starts every request of a pipelined burst it has parsed while no answer is written
 * yet, and reads on: one connection pipelining GET /v1/subscriptions/{id} without reading
 * had 106,000 requests in processing, the node's RSS at 1.7 GB and other clients' requests
 * waiting 14 s for the pool. The operations answered at once need no slot: their answers
 * fill the socket, and Node stops reading a connection whose answers are not read.
 */
function takeSlot(ctx: Context, route: RouteSpec): () => void {
  if (ANSWERED_AT_ONCE.has(route.operationId)) return () => undefined;
  const socket = ctx.req.socket;
  const n = inProcessing.get(socket) ?? 0;
  if (n >= HTTP_REQUESTS_PER_CONNECTION) {
    throw new OrbitError("UNAVAILABLE", `at most ${HTTP_REQUESTS_PER_CONNECTION} requests of a connection are processed at once`, {
      "Retry-After": "1",
      Connection: "close",
    });
  }
  inProcessing.set(socket, n + 1);
  return () => inProcessing.set(socket, (inProcessing.get(socket) ?? 1) - 1);
}

async function runOperation(ctx: Context, route: RouteSpec, deps: RouterDeps): Promise<void> {
  ctx.state.operationId = route.operationId;
  const release = takeSlot(ctx, route);
  const controller = new AbortController();
  const work = execute(ctx, route, deps, controller.signal);
  // The slot is held until the work ends, also past the deadline's 503.
  work.then(release, release);
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      controller.abort();
      reject(unavailable());
    }, deadlineMs(route, deps.requestTimeoutMs));
  });
  try {
    const result = await Promise.race([work, deadline]);
    ctx.status = result.status;
    if ("data" in result) ctx.body = success(ctx.state.requestId as string, result.data);
    if ("raw" in result && route.rawContentType) {
      ctx.type = route.rawContentType;
      ctx.body = result.raw;
    }
  } finally {
    clearTimeout(timer);
    // After a timeout the work goes on until its transaction rolls back; its outcome
    // is no longer anyone's to report.
    work.catch(() => undefined);
  }
}

/**
 * The management deadline (8 s). A worker claim may long-poll up to 20 s on purpose, so
 * its deadline is the longest wait plus the same 8 s; the claim bounds its own wait by
 * the wait_ms it was given (openapi.yaml: 28 s whatever its wait_ms — the body is not read
 * yet when the deadline starts).
 */
function deadlineMs(route: RouteSpec, requestTimeoutMs: number): number {
  return route.operationId === "claimTask" ? requestTimeoutMs + MAX_CLAIM_WAIT_MS : requestTimeoutMs;
}

type AnyResult = { status: number; data?: unknown; raw?: string };

/**
 * The operations that authenticate from what the node remembers of the credential, with
 * no lookup of their own (credential-lookups.ts): a worker's call on its attempt, whose
 * batch transaction checks every member's credential is not revoked (worker.ts
 * endAttemptCalls). The workers' calls are most of the requests at a high result rate.
 * Not the claim: it comes first in a worker's loop, and its lookup keeps the memory
 * fresh for the calls that follow (the tests widen a credential's scope by hand, which
 * no API does, and a claim from memory missed the new queue: 404).
 */
const REVOCATION_IN_TRANSACTION: ReadonlySet<string> = new Set(["completeAttempt", "requeueAttempt"]);

async function execute(ctx: Context, route: RouteSpec, deps: RouterDeps, signal: AbortSignal): Promise<AnyResult> {
  const remembered = REVOCATION_IN_TRANSACTION.has(route.operationId);
  const caller = await resolveCaller(ctx, route, deps.services.credentials, remembered);
  if (!remembered || !caller) return perform(ctx, route, deps, signal, caller);
  try {
    return await perform(ctx, route, deps, signal, caller);
  } catch (e) {
    await refuseIfRevoked(deps.services.credentials, caller, e);
    throw e;
  }
}

/**
 * A caller authenticated from memory is refused (4xx) only once its credential is found
 * active now: a revoked token gets 401 before any other answer (decision 5), as it would
 * from its own lookup. A refusal is rare on the worker's path, so this costs nothing there.
 */
async function refuseIfRevoked(credentials: CredentialLookups, caller: Caller, e: unknown): Promise<void> {
  if (!(e instanceof OrbitError) || e.status >= 500 || e.code === "UNAUTHENTICATED") return;
  let now;
  try {
    now = await credentials.find(caller.credentialId);
  } catch (lookupError) {
    throw translateDbError(lookupError);
  }
  if (!now || now.revoked_at !== null) throw unauthenticated();
}

/**
 * The reason every request's `clientGone` is aborted with, once its response closed.
 * abort() without one makes a DOMException and captures its stack, on every request:
 * 2 % of node A's busy samples at 500 results/s (bench/HISTORY.md, session 26). Nothing
 * reads the reason.
 */
const CLIENT_GONE = new Error("the response closed");

async function perform(ctx: Context, route: RouteSpec, deps: RouterDeps, signal: AbortSignal, caller: Caller | undefined): Promise<AnyResult> {
  if (route.transport === "websocket") {
    readQuery(ctx, route);
    // A plain GET of the event endpoint: the caller may consume but did not upgrade.
    throw protocolRequired();
  }
  const path = readPath(ctx, route);
  const { query, refusal } = readShape(ctx, route);
  if (refusal) {
    // Decision 5: the target's scope (404) before validation (400). An operation on a
    // target keeps the 400 of its query string or unwanted body until its handler has
    // checked that target; one without a target (public, the caller's own credential)
    // answers it now.
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
    if (!route.successStatuses.includes(result.status)) throw new Error(`${route.operationId} answered ${result.status}`);
    // An operation with a body must validate it; a handler that skipped that is a bug.
    if (route.hasBody && !input.wasRead()) throw new Error(`${route.operationId} never read its body`);
    if (route.idempotency === "required" && !input.keyWasRead()) throw new Error(`${route.operationId} ignored its key`);
    return result;
  } catch (e) {
    throw translateDbError(e);
  }
}

/** `remembered`: authenticate from the node's memory (REVOCATION_IN_TRANSACTION). */
async function resolveCaller(ctx: Context, route: RouteSpec, credentials: CredentialLookups, remembered: boolean): Promise<Caller | undefined> {
  if (route.permission === "none") return undefined;
  let caller: Caller;
  try {
    // A repeated Authorization header is ambiguous: it authenticates nothing.
    const values = ctx.req.headersDistinct["authorization"] ?? [];
    const header = values.length === 1 ? values[0] : undefined;
    caller = remembered ? await authenticateRemembered(credentials, header) : await authenticate(credentials, header);
  } catch (e) {
    throw translateDbError(e);
  }
  ctx.state.credentialId = caller.credentialId;
  if (route.permission !== "token") {
    if (!isAction(route.permission)) throw new Error(`unknown permission ${route.permission}`);
    try {
      requireAction(caller, route.permission);
    } catch (e) {
      if (remembered) await refuseIfRevoked(credentials, caller, e);
      throw e;
    }
  }
  return caller;
}

/** The query string and whether a body came where none is taken: the parameters, or the 400 they are owed. */
function readShape(ctx: Context, route: RouteSpec): { query: Record<string, unknown>; refusal?: OrbitError } {
  try {
    const query = readQuery(ctx, route);
    if (!route.hasBody && requestHasBody(ctx.req)) throw invalidArgument("this operation takes no body");
    return { query };
  } catch (e) {
    if (e instanceof OrbitError) return { query: {}, refusal: e };
    throw e;
  }
}

/**
 * A refused query string that names one well-formed `queue_id` names the operation's
 * target (listSubscriptions): a queue outside the caller's scope is 404, as a body naming
 * one is (handlers/queue-scope.ts). The value is taken as sent, undecoded.
 */
function queueOfQueryInScope(ctx: Context, route: RouteSpec, caller: Caller): void {
  if (!route.queryParams.some((p) => p.name === "queue_id")) return;
  const url = ctx.request.url;
  const raw = url.includes("?") ? url.slice(url.indexOf("?") + 1) : "";
  const named = raw.split("&").filter((p) => p.startsWith("queue_id=")).map((p) => p.slice("queue_id=".length));
  const queueId = named.length === 1 ? wellFormedId(named[0]) : undefined;
  if (queueId !== undefined) requireQueue(caller, queueId);
}

/** Query parameters: only where the contract declares them, each once, canonical. */
function readQuery(ctx: Context, route: RouteSpec): Record<string, unknown> {
  const raw = ctx.request.url.includes("?") ? ctx.request.url.slice(ctx.request.url.indexOf("?") + 1) : undefined;
  if (route.queryParams.length === 0) {
    if (raw !== undefined) throw invalidArgument("this operation takes no query parameters");
    return {};
  }
  let params: Record<string, string>;
  try {
    params = parseQuery(raw ?? "", route.queryParams.map((p) => p.name));
  } catch (e) {
    if (e instanceof WireError) throw invalidArgument(`query: ${e.message}`);
    throw e;
  }
  const typed: Record<string, unknown> = { ...params };
  for (const p of route.queryParams) {
    const v = params[p.name];
    if (v === undefined || !p.integer) continue;
    // Integers travel as canonical decimal text: no sign, no leading zero, no fraction.
    if (!/^(0|[1-9][0-9]{0,8})$/.test(v)) throw invalidArgument(`query parameter ${p.name} must be a canonical integer`);
    typed[p.name] = Number(v);
  }
  return check(`query_${route.operationId}`, typed, "query");
}

/** Path ids that cannot exist (wrong shape) are simply not found. */
function readPath(ctx: Context, route: RouteSpec): Record<string, string> {
  if (route.pathParams.length === 0) return {};
  const params: Record<string, string> = {};
  for (const name of route.pathParams) params[name] = String(ctx.params[name] ?? "");
  const fn = validator(`path_${route.operationId}`);
  if (fn && !fn(params)) throw notFound();
  return params;
}

/** `refusal`: the 400 the request's shape is owed, thrown once the body or key is asked for. */
function lazyInput(ctx: Context, route: RouteSpec, refusal: OrbitError | undefined) {
  let read = false;
  let keyRead = false;
  let raw: ReadonlyMap<string, string> = new Map();
  let text: string | undefined;
  return {
    wasRead: () => read,
    keyWasRead: () => keyRead,
    async body(): Promise<unknown> {
      if (read) throw new Error("body() called twice");
      read = true;
      const parsed = await readJsonBody(ctx.req);
      raw = parsed.raw;
      text = parsed.text;
      // Parsed first: a body that names a queue outside the scope is still 404 (queue-scope.ts).
      if (refusal) throw refusal;
      return check(`body_${route.operationId}`, parsed.value, "body");
    },
    idempotencyKey(): string {
      keyRead = true;
      if (refusal) throw refusal;
      const values = ctx.req.headersDistinct["idempotency-key"] ?? [];
      if (values.length > 1) throw invalidArgument("the Idempotency-Key header is repeated");
      const key = values[0] ?? "";
      if (key === "") throw invalidArgument("the Idempotency-Key header is required");
      if (!IDEMPOTENCY_KEY_RE.test(key)) throw invalidArgument("the Idempotency-Key must be 1-128 printable ASCII characters");
      return key;
    },
    rawField: (name: string) => raw.get(name),
    canonicalBody(): string {
      if (text === undefined) throw new Error("canonicalBody() before body()");
      return canonicalJson(text);
    },
  };
}

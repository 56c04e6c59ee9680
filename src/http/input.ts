// An operation's input, as the contract declares it: path ids (404 when they cannot
// exist), the query string, and the body and Idempotency-Key, read on demand by the
// handler (400). A request's shape that is refused (a query string or a body the
// operation does not take) is kept as its `refusal`, thrown once its target's scope is
// checked (docs/protocol.md §1: 404 before 400).
import type { Context } from "koa";
import type { RouteSpec } from "../../generated/http/routes.js";
import type { Caller } from "../domain/identity.js";
import { requireQueue } from "../domain/tasks.js";
import { canonicalJson } from "../wire/canonical.js";
import { OrbitError, invalidArgument, notFound } from "../wire/errors.js";
import { wellFormedId } from "../wire/ids.js";
import { parseQuery } from "../wire/query.js";
import { WireError } from "../wire/wire-error.js";
import { readJsonBody, requestHasBody } from "./body.js";
import { check, validator } from "./validation.js";

/** Idempotency keys: 1–128 printable ASCII, no leading or trailing space (docs/protocol.md §1). */
const IDEMPOTENCY_KEY_RE = /^[\x21-\x7E](?:[\x20-\x7E]{0,126}[\x21-\x7E])?$/;

/** The query string and whether a body came where none is taken: the parameters, or the 400 they are owed. */
export function readShape(ctx: Context, route: RouteSpec): { query: Record<string, unknown>; refusal?: OrbitError } {
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
export function queueOfQueryInScope(ctx: Context, route: RouteSpec, caller: Caller): void {
  if (!route.queryParams.some((p) => p.name === "queue_id")) return;
  const url = ctx.request.url;
  const raw = url.includes("?") ? url.slice(url.indexOf("?") + 1) : "";
  const named = raw
    .split("&")
    .filter((p) => p.startsWith("queue_id="))
    .map((p) => p.slice("queue_id=".length));
  const queueId = named.length === 1 ? wellFormedId(named[0]) : undefined;
  if (queueId !== undefined) requireQueue(caller, queueId);
}

/** Query parameters: only where the contract declares them, each once, canonical. */
export function readQuery(ctx: Context, route: RouteSpec): Record<string, unknown> {
  const raw = ctx.request.url.includes("?") ? ctx.request.url.slice(ctx.request.url.indexOf("?") + 1) : undefined;
  if (route.queryParams.length === 0) {
    if (raw !== undefined) throw invalidArgument("this operation takes no query parameters");
    return {};
  }
  let params: Record<string, string>;
  try {
    params = parseQuery(
      raw ?? "",
      route.queryParams.map((p) => p.name),
    );
  } catch (e) {
    if (e instanceof WireError) throw invalidArgument(`query: ${e.message}`);
    throw e;
  }
  const typed: Record<string, unknown> = { ...params };
  for (const p of route.queryParams) {
    const v = params[p.name];
    if (v === undefined || !p.integer) continue;
    // Integers travel as canonical decimal text: no sign, no leading zero, no fraction.
    if (!/^(0|[1-9][0-9]{0,8})$/.test(v))
      throw invalidArgument(`query parameter ${p.name} must be a canonical integer`);
    typed[p.name] = Number(v);
  }
  return check(`query_${route.operationId}`, typed, "query");
}

/** Path ids that cannot exist (wrong shape) are simply not found. */
export function readPath(ctx: Context, route: RouteSpec): Record<string, string> {
  if (route.pathParams.length === 0) return {};
  const params: Record<string, string> = {};
  for (const name of route.pathParams) params[name] = String(ctx.params[name] ?? "");
  const fn = validator(`path_${route.operationId}`);
  if (fn && !fn(params)) throw notFound();
  return params;
}

/** `refusal`: the 400 the request's shape is owed, thrown once the body or key is asked for. */
export function lazyInput(ctx: Context, route: RouteSpec, refusal: OrbitError | undefined) {
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
      if (!IDEMPOTENCY_KEY_RE.test(key))
        throw invalidArgument("the Idempotency-Key must be 1-128 printable ASCII characters");
      return key;
    },
    rawField: (name: string) => raw.get(name),
    canonicalBody(): string {
      if (text === undefined) throw new Error("canonicalBody() before body()");
      return canonicalJson(text);
    },
  };
}

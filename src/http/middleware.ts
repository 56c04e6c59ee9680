// The middleware that wraps every request, registered first so that it sees every
// response: request id and no-store headers, the error envelope, the access log line.
import { requestIdFrom } from "../wire/ids.js";
import type { IncomingMessage } from "node:http";
import type { Context, Next } from "koa";
import { MAX_BODY_BYTES } from "../config/limits.js";
import { ERROR_CATALOGUE, OrbitError, invalidArgument, type ErrorCode } from "../wire/errors.js";
import { describeError, type Logger } from "../log/index.js";
import { failure } from "../wire/envelope.js";
import { recordRequest } from "../edge/access-log.js";
import type { ClientAddress } from "../edge/client-address.js";
import * as metrics from "../metrics.js";
import { targetPath } from "./target.js";

/** Statuses produced by the router or Koa itself, mapped onto catalogue codes. */
const STATUS_CODES: Readonly<Record<number, ErrorCode>> = {
  400: "INVALID_ARGUMENT",
  404: "NOT_FOUND",
  405: "METHOD_NOT_ALLOWED",
  413: "PAYLOAD_TOO_LARGE",
  415: "UNSUPPORTED_MEDIA_TYPE",
  501: "NOT_IMPLEMENTED",
  503: "UNAVAILABLE",
};

export function requestContext(log: Logger, clientAddress: ClientAddress) {
  return async function requestContextMiddleware(ctx: Context, next: Next): Promise<void> {
    const started = process.hrtime.bigint();
    // Read now: a socket destroyed before the log line (a client gone) has no address.
    const address = clientAddress(ctx.req);
    const requestId = requestIdFrom(ctx.get("x-request-id"));
    ctx.state.requestId = requestId;
    ctx.set("X-Request-ID", requestId);
    ctx.set("Cache-Control", "no-store");
    try {
      await next();
      // The router answers unmatched paths (404), other methods (405, with Allow) and
      // unknown methods (501) with a bare status; give them the envelope.
      const code = STATUS_CODES[ctx.status];
      if (ctx.body == null && code) throw new OrbitError(code);
    } catch (e) {
      writeError(ctx, e, log);
    }
    try {
      if (ctx.status >= 400) await drainUnread(ctx.req);
      // A body still coming after the answer (stalled, or beyond the drain): close the
      // connection after the answer. Kept alive, Node would go on reading it, and its
      // request timeout would write a second answer (a 400 from clientError) after this one.
      if (!ctx.req.complete) ctx.set("Connection", "close");
    } finally {
      const route = (ctx.state.operationId as string | undefined) ?? "unmatched";
      recordRequest(log, {
        requestId,
        method: ctx.method,
        route,
        status: ctx.status,
        started,
        clientAddress: address,
        credentialId: ctx.state.credentialId as string | undefined,
      });
    }
  };
}

/**
 * Before routing: an absolute-form target (`GET http://host/v1/tasks`) is routed as the
 * path it names when it names this Host, and is 400 otherwise (target.ts): a request
 * meant for another host or scheme is not answered as if it were this one's.
 */
export function absoluteForm() {
  return async function absoluteFormMiddleware(ctx: Context, next: Next): Promise<void> {
    const path = targetPath(ctx.url, ctx.req.headers.host);
    if (path === undefined)
      throw invalidArgument("an absolute request target must be an http URL naming the Host header's host");
    ctx.url = path;
    await next();
  };
}

/** An error answer waits at most this long for the rest of an unread body. */
const DRAIN_TIMEOUT_MS = 2000;
/** An error answer reads at most this much of an unread body; beyond it Node closes the connection after the answer. */
const DRAIN_LIMIT_BYTES = 2 * MAX_BODY_BYTES;

/**
 * An error answered before the body was read (404 for an unknown attempt, 413 from the
 * declared length): read and discard the rest first, so that a client still writing it
 * receives the answer rather than a reset (EPIPE) when the socket closes under it.
 */
async function drainUnread(req: IncomingMessage): Promise<void> {
  if (req.complete || req.readableEnded || req.destroyed) return;
  if (Number(req.headers["content-length"] ?? 0) > DRAIN_LIMIT_BYTES) return;
  await new Promise<void>((resolve) => {
    let read = 0;
    const done = (): void => {
      clearTimeout(timer);
      req.off("data", count);
      resolve();
    };
    const count = (chunk: Buffer): void => {
      read += chunk.length;
      if (read > DRAIN_LIMIT_BYTES) done();
    };
    const timer = setTimeout(done, DRAIN_TIMEOUT_MS);
    req.on("data", count).once("end", done).once("close", done).once("error", done);
  });
}

function writeError(ctx: Context, e: unknown, log: Logger): void {
  let err: OrbitError;
  if (e instanceof OrbitError) {
    err = e;
  } else {
    const status = (e as { status?: unknown })?.status;
    const code = typeof status === "number" ? STATUS_CODES[status] : undefined;
    // Client errors Koa raises itself (e.g. a malformed URL) keep their status; anything
    // else is a bug and says nothing about itself.
    const expose = (e as { expose?: unknown })?.expose === true;
    err = code && expose ? new OrbitError(code) : new OrbitError("INTERNAL");
    if (err.code === "INTERNAL") {
      log.log("error", "unexpected error", { request_id: ctx.state.requestId as string, ...describeError(e) });
      if (typeof (e as { errno?: unknown })?.errno === "number") metrics.databaseErrors.inc({ kind: "other" });
    }
  }
  ctx.status = ERROR_CATALOGUE[err.code].status;
  for (const [k, v] of Object.entries(err.headers)) ctx.set(k, v);
  ctx.body = failure(ctx.state.requestId as string, err.code, err.message);
}

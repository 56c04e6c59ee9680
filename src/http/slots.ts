// How many requests of one HTTP connection are processed at once.
import type { Context } from "koa";
import type { Socket } from "node:net";
import type { RouteSpec } from "../../generated/http/routes.js";
import { HTTP_REQUESTS_PER_CONNECTION } from "../config/limits.js";
import { OrbitError } from "../wire/errors.js";

/** The operations that never wait for the database; openapi.yaml lists no 503 on them. */
const ANSWERED_AT_ONCE: ReadonlySet<string> = new Set(["getOpenapiDocument", "getEventsSchema", "getLiveness"]);

/** Operations of each connection whose work has not finished (a timed-out one's included). */
const inProcessing = new WeakMap<Socket, number>();

/**
 * A slot of the connection's HTTP_REQUESTS_PER_CONNECTION, or 503 with Connection: close;
 * the answer releases the slot. Node starts every request of a pipelined burst it has
 * parsed while no answer is written yet, and reads on: without a bound, one connection
 * pipelining requests without reading its answers would put any number of them in
 * processing, holding the node's memory and the database pool from every other client.
 * The operations answered at once need no slot: their answers fill the socket, and Node
 * stops reading a connection whose answers are not read.
 */
export function takeSlot(ctx: Context, route: RouteSpec): () => void {
  if (ANSWERED_AT_ONCE.has(route.operationId)) return () => undefined;
  const socket = ctx.req.socket;
  const n = inProcessing.get(socket) ?? 0;
  if (n >= HTTP_REQUESTS_PER_CONNECTION) {
    throw new OrbitError(
      "UNAVAILABLE",
      `at most ${HTTP_REQUESTS_PER_CONNECTION} requests of a connection are processed at once`,
      {
        "Retry-After": "1",
        Connection: "close",
      },
    );
  }
  inProcessing.set(socket, n + 1);
  return () => inProcessing.set(socket, (inProcessing.get(socket) ?? 1) - 1);
}

// Builds the @koa/router from the generated route table. Every operation runs the same
// pipeline (operation.ts), in the order of checks of docs/protocol.md §1:
//   authenticate (401) → action (403) → path ids (404) → handler: scope (404) →
//   query string, body and Idempotency-Key, read on demand (400) → state (409)
// all inside the management deadline. (A worker's complete and requeue check the
// credential's revocation in their own transaction, and again before any refusal:
// caller.ts REVOCATION_IN_TRANSACTION.) A handler never touches ctx: it returns
// {status, data} and the pipeline writes the envelope.
import Router from "@koa/router";
import { ROUTES, type Implementation, type RouteSpec } from "../../generated/http/routes.js";
import type { Pool } from "../db/types.js";
import type { Caller } from "../domain/identity.js";
import type { NodeServices } from "../domain/services.js";
import { onAnotherActionPath } from "./method-not-allowed.js";
import { runOperation } from "./operation.js";

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
  /**
   * The caller from a lookup of its credential now. An operation authenticated from the
   * node's memory (caller.ts REVOCATION_IN_TRANSACTION) asks for it before it refuses a
   * queue that memory lacks: a scope granted since is then seen at once. Elsewhere the
   * caller is from a lookup already, and this returns it.
   */
  callerNow(): Promise<Caller>;
}

export interface RouterDeps {
  readonly pool: Pool;
  readonly services: NodeServices;
  readonly handlers: Implementation<HandlerContext>;
  readonly requestTimeoutMs: number;
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

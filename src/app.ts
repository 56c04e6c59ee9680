// buildApp(deps): the Koa application, with no listening socket and no process
// handling, so tests can build it in-process; src/server.ts and the CLI do those.
import Koa from "koa";
import type { Pool } from "./db/types.js";
import { describeError, type Logger } from "./log/index.js";
import { absoluteForm, requestContext } from "./http/middleware.js";
import { buildRouter, methodNotAllowed, type HandlerContext } from "./http/router.js";
import type { Implementation } from "../generated/http/routes.js";
import type { NodeServices } from "./domain/services.js";
import { handlers as defaultHandlers } from "./http/handlers/index.js";

export interface AppDeps {
  readonly pool: Pool;
  readonly services: NodeServices;
  readonly log: Logger;
  readonly requestTimeoutMs: number;
  readonly handlers?: Implementation<HandlerContext>;
}

export function buildApp(deps: AppDeps): Koa {
  const app = new Koa();
  app.proxy = false;
  // Koa's default error printer writes stack traces; errors are logged by class only.
  app.silent = true;
  app.on("error", (e: unknown) => deps.log.log("error", "koa error", describeError(e)));
  const router = buildRouter({
    pool: deps.pool,
    services: deps.services,
    handlers: deps.handlers ?? defaultHandlers,
    requestTimeoutMs: deps.requestTimeoutMs,
  });
  app.use(requestContext(deps.log));
  app.use(absoluteForm());
  app.use(methodNotAllowed());
  app.use(router.routes());
  return app;
}

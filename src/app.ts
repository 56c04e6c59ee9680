// buildApp(deps): the Koa application, with no listening socket and no process
// handling, so tests can build it in-process; src/server.ts and the CLI do those.
import Koa from "koa";
import type { Pool } from "./db/types.js";
import { describeError, type Logger } from "./log/index.js";
import { absoluteForm, requestContext } from "./http/middleware.js";
import { methodNotAllowed } from "./http/method-not-allowed.js";
import { buildRouter, type HandlerContext } from "./http/router.js";
import type { Implementation } from "../generated/http/routes.js";
import type { NodeServices } from "./domain/services.js";
import { handlers as defaultHandlers } from "./http/handlers/index.js";
import { metricsOnOwnListener } from "./http/handlers/operator.js";
import type { ClientAddress } from "./edge/client-address.js";

export interface AppDeps {
  readonly pool: Pool;
  readonly services: NodeServices;
  readonly log: Logger;
  readonly requestTimeoutMs: number;
  readonly handlers?: Implementation<HandlerContext>;
  /** The access log's client address of a request (ORBIT_TRUSTED_PROXIES). */
  readonly clientAddress: ClientAddress;
  /** GET /metrics has a listener of its own (ORBIT_METRICS_PORT): this one answers it 404. */
  readonly metricsElsewhere: boolean;
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
    handlers: deps.metricsElsewhere
      ? { ...(deps.handlers ?? defaultHandlers), getMetrics: metricsOnOwnListener }
      : (deps.handlers ?? defaultHandlers),
    requestTimeoutMs: deps.requestTimeoutMs,
  });
  app.use(requestContext(deps.log, deps.clientAddress));
  app.use(absoluteForm());
  app.use(methodNotAllowed());
  app.use(router.routes());
  return app;
}

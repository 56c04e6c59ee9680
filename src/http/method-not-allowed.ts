// 405 METHOD_NOT_ALLOWED: which operations a path asked has, read from the router's
// matched layers, with action paths (`/v1/tasks/{id}:cancel`) told apart from the resource
// whose template they also fit.
import type { Context, Next } from "koa";
import { ROUTES, type RouteSpec } from "../../generated/http/routes.js";

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
 * A path whose last segment names an action after its id (`…/{id}:cancel`). A scan, not
 * a pattern: the path is anyone's, and a pattern with two unbounded runs backtracks in
 * quadratic time on a long segment of colons.
 */
const inActionForm = (path: string | null | undefined): boolean =>
  // A CONNECT's authority-form target has no path (Koa's ctx.path is then null).
  typeof path === "string" && path.indexOf(":", path.lastIndexOf("/")) !== -1;

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
  // path, 404 to every method, not 405 with the resource's methods.
  return inActionForm(ctx.path) ? [] : layers;
}

/**
 * Whether the request is on another operation's action path, routed here only because its
 * template fits too (a GET of /v1/tasks/{id}:cancel reaches getTask): such a request is
 * left unanswered for methodNotAllowed, which answers 405 with Allow: POST before
 * authentication, as on any known path asked with another method.
 */
export function onAnotherActionPath(ctx: Context, route: RouteSpec): boolean {
  return !pathLayers(ctx).some((l) => l.name === route.operationId);
}

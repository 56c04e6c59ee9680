// generated/http/routes.ts: the route table (one row per operationId) and the typed
// Implementation — one handler per HTTP operation. A missing handler, or one returning
// a shape the contract does not allow, is a compile error in src/http/handlers.
import { collectOperations } from "./openapi.mjs";

const q = (s) => JSON.stringify(s);

/** "/v1/subscriptions/{id}:configure" -> "/v1/subscriptions/:id\\:configure" for @koa/router. */
function routerPath(p) {
  return p
    .split(/(\{[a-z_]+\})/)
    .map((part) => {
      const m = /^\{([a-z_]+)\}$/.exec(part);
      return m ? `:${m[1]}` : part.replace(/[:()*?+{}\\]/g, (c) => `\\${c}`);
    })
    .join("");
}

function isInteger(schema) {
  return schema?.type === "integer";
}

function routeRow(op) {
  return [
    "  {",
    `    operationId: ${q(op.operationId)},`,
    `    method: ${q(op.method)},`,
    `    path: ${q(op.path)},`,
    `    routerPath: ${q(routerPath(op.path))},`,
    `    permission: ${q(op.permission)},`,
    `    idempotency: ${q(op.idempotency)},`,
    `    transport: ${q(op.transport)},`,
    `    hasBody: ${Boolean(op.bodySchema)},`,
    `    pathParams: [${op.pathParams.map((p) => q(p.name)).join(", ")}],`,
    `    queryParams: [${op.queryParams
      .map((p) => `{ name: ${q(p.name)}, required: ${p.required}, integer: ${isInteger(p.schema)} }`)
      .join(", ")}],`,
    `    successStatuses: [${op.success.map((s) => s.status).join(", ")}],`,
    `    rawContentType: ${q(op.success.find((s) => s.rawType)?.rawType ?? null)},`,
    "  },",
  ].join("\n");
}

function typesRow(op) {
  const o = `operations[${q(op.operationId)}]`;
  const path = op.pathParams.length ? `${o}["parameters"]["path"]` : "Record<string, never>";
  const query = op.queryParams.length ? `NonNullable<${o}["parameters"]["query"]>` : "Record<string, never>";
  const body = op.bodySchema ? `NonNullable<${o}["requestBody"]>["content"]["application/json"]` : "undefined";
  const results = op.success.map((s) =>
    s.hasBody
      ? `{ status: ${s.status}; data: ${o}["responses"][${s.status}]["content"]["application/json"]["data"] }`
      : s.rawType
        ? `{ status: ${s.status}; raw: string }`
        : `{ status: ${s.status} }`,
  );
  return [
    `  ${op.operationId}: {`,
    `    path: ${path};`,
    `    query: ${query};`,
    `    body: ${body};`,
    `    result: ${results.join(" | ") || "never"};`,
    "  };",
  ].join("\n");
}

export function emitRoutes(openapi) {
  const ops = collectOperations(openapi);
  const http = ops.filter((o) => o.transport === "http");
  return [
    'import type { operations } from "./openapi-types.js";',
    "",
    "export interface RouteSpec {",
    "  readonly operationId: string;",
    '  readonly method: "GET" | "POST" | "PUT" | "DELETE" | "PATCH";',
    "  readonly path: string;",
    "  readonly routerPath: string;",
    '  /** An action, "token" (any valid credential) or "none" (public). */',
    "  readonly permission: string;",
    '  readonly idempotency: "required" | "ignored" | "none";',
    '  readonly transport: "http" | "websocket";',
    "  readonly hasBody: boolean;",
    "  readonly pathParams: readonly string[];",
    "  readonly queryParams: readonly { readonly name: string; readonly required: boolean; readonly integer: boolean }[];",
    "  readonly successStatuses: readonly number[];",
    "  /** Set when the success body is a file served as is (not the JSON envelope). */",
    "  readonly rawContentType: string | null;",
    "}",
    "",
    "export const ROUTES = [",
    ...ops.map(routeRow),
    "] as const satisfies readonly RouteSpec[];",
    "",
    'export type OperationId = (typeof ROUTES)[number]["operationId"];',
    `export type HttpOperationId = ${http.map((o) => q(o.operationId)).join(" | ")};`,
    "",
    "export interface OperationTypes {",
    ...http.map(typesRow),
    "}",
    "",
    "/**",
    " * What a handler receives. Path and query are validated before the handler runs;",
    " * the body (and the Idempotency-Key) are read and validated only when the handler",
    " * asks, after its scope checks, so that the order of checks is 401 → 403 → 404 →",
    " * 400 → 409 (docs/protocol.md §1).",
    " */",
    "export interface HandlerRequest<K extends HttpOperationId> {",
    '  readonly path: OperationTypes[K]["path"];',
    '  readonly query: OperationTypes[K]["query"];',
    '  readonly body: () => Promise<OperationTypes[K]["body"]>;',
    "  readonly idempotencyKey: () => string;",
    "  /** The exact JSON text of a top-level body field as sent (after body() resolved). */",
    "  readonly rawField: (name: string) => string | undefined;",
    "  /** The canonical text of the body (sorted keys, numbers as sent), after body() resolved. */",
    "  readonly canonicalBody: () => string;",
    "}",
    "",
    'export type HandlerResult<K extends HttpOperationId> = OperationTypes[K]["result"];',
    "",
    "export type Handler<K extends HttpOperationId, Ctx> = (req: HandlerRequest<K>, ctx: Ctx) => Promise<HandlerResult<K>>;",
    "",
    "/** Every HTTP operation of openapi.yaml, each with its handler. */",
    "export type Implementation<Ctx> = { readonly [K in HttpOperationId]: Handler<K, Ctx> };",
    "",
  ].join("\n");
}

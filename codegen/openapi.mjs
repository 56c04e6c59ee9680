// Reads operations out of the OpenAPI document, resolving local $refs, in a stable order.

const METHODS = ["get", "put", "post", "delete", "patch"];

export function resolve(doc, node) {
  let n = node;
  for (let hops = 0; n && typeof n === "object" && typeof n.$ref === "string"; hops++) {
    if (hops > 16 || !n.$ref.startsWith("#/")) throw new Error(`cannot resolve ${n.$ref}`);
    n = n.$ref
      .slice(2)
      .split("/")
      .map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~"))
      .reduce((o, k) => o?.[k], doc);
    if (n === undefined) throw new Error(`dangling $ref ${node.$ref}`);
  }
  return n;
}

/** Rewrites OpenAPI component refs to refs inside the "orbit-http" $defs document. */
export function rewriteRefs(node) {
  if (Array.isArray(node)) return node.map(rewriteRefs);
  if (!node || typeof node !== "object") return node;
  const outNode = {};
  for (const [k, v] of Object.entries(node)) {
    if (k === "$ref" && typeof v === "string") {
      const m = /^#\/components\/schemas\/(.+)$/.exec(v);
      if (!m) throw new Error(`unsupported $ref in a schema: ${v}`);
      outNode[k] = `orbit-http#/$defs/${m[1]}`;
    } else {
      outNode[k] = rewriteRefs(v);
    }
  }
  return outNode;
}

export function collectOperations(openapi) {
  const ops = [];
  for (const p of Object.keys(openapi.paths ?? {}).sort()) {
    const item = openapi.paths[p];
    for (const method of METHODS) {
      const op = item[method];
      if (!op) continue;
      if (!op.operationId) throw new Error(`${method.toUpperCase()} ${p} has no operationId`);
      const params = [...(item.parameters ?? []), ...(op.parameters ?? [])].map((x) => resolve(openapi, x));
      const byIn = (where) =>
        params
          .filter((x) => x.in === where)
          .map((x) => ({ name: x.name, required: x.required === true, schema: x.schema ?? {} }));
      const body = op.requestBody ? resolve(openapi, op.requestBody) : undefined;
      const bodyMedia = body?.content?.["application/json"];
      if (body && !bodyMedia) throw new Error(`${op.operationId}: request bodies must be application/json`);
      const responses = Object.entries(op.responses ?? {})
        .map(([status, r]) => [status, resolve(openapi, r)])
        .sort(([a], [b]) => a.localeCompare(b));
      const responseSchemas = responses
        .filter(([, r]) => r.content?.["application/json"]?.schema)
        .map(([status, r]) => [status, r.content["application/json"].schema]);
      const success = responses
        .filter(([status]) => /^2[0-9][0-9]$/.test(status))
        .map(([status, r]) => {
          const types = Object.keys(r.content ?? {});
          // A success body that is not the JSON envelope is served raw (the contract files).
          const rawType = types.length && !types.includes("application/json") ? types[0] : undefined;
          return { status: Number(status), hasBody: Boolean(r.content?.["application/json"]), rawType };
        });
      const permission = op["x-orbit-permission"];
      if (typeof permission !== "string") throw new Error(`${op.operationId}: x-orbit-permission is missing`);
      ops.push({
        operationId: op.operationId,
        method: method.toUpperCase(),
        path: p,
        permission,
        idempotency: op["x-orbit-idempotency"] ?? "none",
        transport: op["x-orbit-transport"] ?? "http",
        bodySchema: bodyMedia?.schema,
        bodyRequired: body?.required === true,
        pathParams: byIn("path"),
        queryParams: byIn("query"),
        headerParams: byIn("header"),
        responseSchemas,
        success,
      });
    }
  }
  return ops.sort((a, b) => a.operationId.localeCompare(b.operationId));
}

// Checks a real response against openapi.yaml itself, as an SDK generated from it would
// read it: the status is one the operation declares, the Content-Type one of that
// response's media types (none when it declares no content), the JSON body valid under
// a strict validator compiled here from the document (not the generated one), and every
// header the response declares required is present and valid.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { Ajv2020 } from "ajv/dist/2020.js";
import type { AnySchemaObject, ValidateFunction } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import { parse as parseYaml } from "yaml";
import type { RawResponse } from "./http.js";

type Json = any;

export const OPENAPI: Json = parseYaml(readFileSync(resolve(process.cwd(), "openapi.yaml"), "utf8"));

function deref(node: Json): Json {
  let n = node;
  for (let hops = 0; n && typeof n.$ref === "string"; hops++) {
    assert.ok(hops < 16 && n.$ref.startsWith("#/"), `cannot resolve ${n.$ref}`);
    n = n.$ref
      .slice(2)
      .split("/")
      .reduce((o: Json, k: string) => o?.[k], OPENAPI);
    assert.ok(n !== undefined, `dangling ${node.$ref}`);
  }
  return n;
}

function rewrite(node: Json): Json {
  if (Array.isArray(node)) return node.map(rewrite);
  if (!node || typeof node !== "object") return node;
  return Object.fromEntries(
    Object.entries(node).map(([k, v]) => [
      k,
      k === "$ref" && typeof v === "string" ? v.replace("#/components/schemas/", "oas#/$defs/") : rewrite(v),
    ]),
  );
}

const ajv = new Ajv2020({ strict: true, allErrors: false, discriminator: true });
addFormatsModule.default(ajv);
ajv.addKeyword("example");
ajv.addSchema({ $id: "oas", $defs: rewrite(OPENAPI.components.schemas) } as AnySchemaObject);
const compiled = new Map<string, ValidateFunction>();
function compile(key: string, schema: Json): ValidateFunction {
  let fn = compiled.get(key);
  if (!fn) {
    fn = ajv.compile({ $id: `oas-${compiled.size}`, ...rewrite(schema) } as AnySchemaObject);
    compiled.set(key, fn);
  }
  return fn;
}

/** Path and method of each operation id. */
export const OPERATIONS = new Map<string, { path: string; method: string; op: Json }>();
for (const [path, item] of Object.entries<Json>(OPENAPI.paths)) {
  for (const method of ["get", "put", "post", "delete", "patch", "head", "options", "trace"]) {
    if (item[method]) OPERATIONS.set(item[method].operationId, { path, method, op: item[method] });
  }
}

/** Operation ids seen with each status, for the coverage assertion at the end. */
export const seen = new Map<string, Set<string>>();

/** The declared response `response` (an operation's, or a components.responses entry). */
export function assertDeclaredResponse(what: string, response: Json, res: RawResponse): void {
  const r = deref(response);
  const media = Object.keys(r.content ?? {});
  const type = String(res.headers["content-type"] ?? "")
    .split(";")[0]!
    .trim();
  if (media.length === 0) {
    assert.equal(res.text, "", `${what}: no content is declared, the server sent ${res.text}`);
  } else {
    assert.ok(media.includes(type), `${what}: Content-Type ${type || "(none)"} is not among ${media.join(", ")}`);
    const schema = r.content[type].schema;
    if (type.endsWith("json")) {
      assert.ok(res.json !== undefined, `${what}: body is not JSON: ${res.text}`);
      const fn = compile(`${what}:${type}`, schema);
      if (schema?.type !== "string")
        assert.ok(fn(res.json), `${what}: body breaks ${type} schema: ${JSON.stringify(fn.errors)}\n${res.text}`);
    }
  }
  for (const [name, h] of Object.entries<Json>(r.headers ?? {})) {
    const header = deref(h);
    const value = res.headers[name.toLowerCase()];
    if (value === undefined) {
      assert.ok(!header.required, `${what}: required header ${name} is missing`);
      continue;
    }
    const text = Array.isArray(value) ? value.join(", ") : value;
    const schema = deref(header.schema);
    const typed = schema?.type === "integer" && /^[0-9]+$/.test(text) ? Number(text) : text;
    const fn = compile(`${what}:header:${name}`, header.schema);
    assert.ok(fn(typed), `${what}: header ${name}: ${text} breaks its schema ${JSON.stringify(fn.errors)}`);
  }
}

/** res is a response of operationId: its status is declared there and the response matches it. */
export function assertOperation(operationId: string, res: RawResponse): void {
  const entry = OPERATIONS.get(operationId);
  assert.ok(entry, `openapi.yaml has no operation ${operationId}`);
  const status = String(res.status);
  const declared = entry.op.responses[status];
  assert.ok(declared, `${operationId} answered ${status}, which openapi.yaml does not list for it: ${res.text}`);
  assertDeclaredResponse(`${operationId} ${status}`, declared, res);
  let s = seen.get(operationId);
  if (!s) seen.set(operationId, (s = new Set()));
  s.add(status);
}

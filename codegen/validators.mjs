// ajv standalone validators. Strict, no coercion, no defaults, no removal of extras:
// a body with an unknown field is rejected, never silently trimmed (docs/protocol.md §1).
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import standaloneCode from "ajv/dist/standalone/index.js";
import { collectOperations, rewriteRefs } from "./openapi.mjs";

export function newAjv() {
  const ajv = new Ajv2020({
    strict: true,
    allErrors: false,
    coerceTypes: false,
    useDefaults: false,
    removeAdditional: false,
    discriminator: true,
    validateFormats: true,
    code: { source: true, esm: true, lines: true, optimize: true },
  });
  addFormats(ajv);
  // OpenAPI annotation keywords that carry no validation meaning.
  ajv.addVocabulary(["example", "xml", "externalDocs"]);
  return ajv;
}

// ajv's standalone ESM output still loads its runtime helpers and ajv-formats with
// require(); this gives the module a require of its own.
const PRELUDE = [
  "// @ts-nocheck",
  'import { createRequire } from "node:module";',
  "const require = createRequire(import.meta.url);",
  "",
].join("\n");

/** One JSON Schema document: the components plus a schema per operation part. */
export function httpSchemaDocument(openapi) {
  const defs = rewriteRefs(structuredClone(openapi.components?.schemas ?? {}));
  const exports = {};
  const add = (name, schema) => {
    defs[name] = rewriteRefs(structuredClone(schema));
    exports[name] = `orbit-http#/$defs/${name}`;
  };
  for (const op of collectOperations(openapi)) {
    if (op.bodySchema) add(`body_${op.operationId}`, op.bodySchema);
    if (op.pathParams.length) add(`path_${op.operationId}`, paramsObject(op.pathParams));
    if (op.queryParams.length) add(`query_${op.operationId}`, paramsObject(op.queryParams));
    for (const [status, schema] of op.responseSchemas) add(`response_${op.operationId}_${status}`, schema);
  }
  for (const h of collectHeaderSchemas(openapi)) add(`header_${h.key}`, h.schema);
  return { schema: { $id: "orbit-http", $defs: defs }, exports };
}

/** Path and query parameters as one object schema; all values already typed. */
function paramsObject(params) {
  return {
    type: "object",
    additionalProperties: false,
    required: params.filter((p) => p.required).map((p) => p.name),
    properties: Object.fromEntries(params.map((p) => [p.name, p.schema])),
  };
}

/**
 * One validator per header name (HTTP header names are case-insensitive), shared by every
 * operation that declares it: a later declaration with another schema would silently lose
 * to the first, so it stops the codegen instead.
 */
function collectHeaderSchemas(openapi) {
  const seen = new Map();
  for (const op of collectOperations(openapi)) {
    for (const h of op.headerParams) {
      const key = h.name.toLowerCase().replace(/[^a-z0-9]+/g, "_");
      const first = seen.get(key);
      if (!first) seen.set(key, { key, schema: h.schema, operationId: op.operationId });
      else if (JSON.stringify(first.schema) !== JSON.stringify(h.schema)) {
        throw new Error(
          `header ${h.name}: ${op.operationId} declares another schema than ${first.operationId}; one header name takes one schema`,
        );
      }
    }
  }
  return [...seen.values()].map(({ key, schema }) => ({ key, schema })).sort((a, b) => a.key.localeCompare(b.key));
}

export function emitHttpValidators(openapi) {
  const { schema, exports } = httpSchemaDocument(openapi);
  const ajv = newAjv();
  ajv.addSchema(schema);
  return PRELUDE + standaloneCode(ajv, sortKeys(exports));
}

export function emitFrameValidators(events) {
  const ajv = newAjv();
  const id = events.$id ?? "orbit-events";
  ajv.addSchema({ ...events, $id: id });
  const exports = {};
  for (const key of Object.keys(events.$defs ?? {}).sort()) exports[key] = `${id}#/$defs/${key}`;
  return PRELUDE + standaloneCode(ajv, exports);
}

function sortKeys(o) {
  return Object.fromEntries(Object.entries(o).sort(([a], [b]) => a.localeCompare(b)));
}

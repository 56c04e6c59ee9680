// The generated standalone validators (generated/http/validators.ts, generated/ws/
// validators.ts) give the same verdict as a fresh, non-strict ajv compiled straight from
// the contract documents, on every example either document or docs/protocol.md carries and on
// near misses crafted from them (a field removed, one added, a value nudged just past a
// pattern, length, range, enum, const or format). The generated code enforces what the
// schemas say, and nothing more: an SDK author validating with any 2020-12 validator
// gets the server's answer.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { Ajv2020 } from "ajv/dist/2020.js";
import type { AnySchemaObject, ValidateFunction } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import { parse as parseYaml } from "yaml";
import * as frames from "../../generated/ws/validators.js";
import * as http from "../../generated/http/validators.js";

type Fn = (d: unknown) => boolean;
type Any = any;

const events = JSON.parse(readFileSync("events.schema.json", "utf8")) as Any;
const openapi = parseYaml(readFileSync("openapi.yaml", "utf8")) as Any;
const spec = readFileSync("docs/protocol.md", "utf8");
const specExamples = [...spec.matchAll(/```json\n([\s\S]*?)```/g)].map((m) => JSON.parse(m[1]!) as unknown);

/** The reference: plain JSON Schema 2020-12 (OpenAPI's `discriminator` and `example` are annotations). */
function freshAjv(): Ajv2020 {
  const ajv = new Ajv2020({ strict: false, validateSchema: false, allErrors: true });
  addFormatsModule.default(ajv);
  return ajv;
}

const ptr = (...parts: string[]) => "#/" + parts.map((p) => p.replace(/~/g, "~0").replace(/\//g, "~1")).join("/");

function at(doc: Any, pointer: string): Any {
  return pointer
    .slice(2)
    .split("/")
    .map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~"))
    .reduce((o, k) => o?.[k], doc);
}

/** Follows a non-schema $ref (a response, parameter or request body) to its pointer. */
function follow(doc: Any, pointer: string): string {
  for (let node = at(doc, pointer); node && typeof node.$ref === "string"; node = at(doc, pointer)) pointer = node.$ref;
  return pointer;
}

// ------------------------------------------------------------- reference validators
const OAS = "openapi-reference";
const httpRef = freshAjv();
httpRef.addSchema({ ...openapi, $id: OAS } as AnySchemaObject);
const refTo = (pointer: string) => httpRef.compile({ $ref: `${OAS}${pointer}` });

function httpReference(): Map<string, ValidateFunction> {
  const refs = new Map<string, ValidateFunction>();
  const headers = new Map<string, string>();
  for (const [p, item] of Object.entries<Any>(openapi.paths)) {
    for (const method of ["get", "put", "post", "delete", "patch"]) {
      const op = item[method];
      if (!op) continue;
      const id = op.operationId as string;
      const params = [
        ...(item.parameters ?? []).map((_: unknown, i: number) => ptr("paths", p, "parameters", String(i))),
        ...(op.parameters ?? []).map((_: unknown, i: number) => ptr("paths", p, method, "parameters", String(i))),
      ].map((x: string) => follow(openapi, x));
      for (const where of ["path", "query"]) {
        const mine = params.filter((x) => at(openapi, x).in === where);
        if (!mine.length) continue;
        refs.set(
          `${where}_${id}`,
          httpRef.compile({
            type: "object",
            additionalProperties: false,
            required: mine.filter((x) => at(openapi, x).required === true).map((x) => at(openapi, x).name),
            properties: Object.fromEntries(mine.map((x) => [at(openapi, x).name, { $ref: `${OAS}${x}/schema` }])),
          }),
        );
      }
      for (const x of params.filter((x) => at(openapi, x).in === "header")) {
        const key = (at(openapi, x).name as string).toLowerCase().replace(/[^a-z0-9]+/g, "_");
        if (!headers.has(key)) headers.set(key, `${x}/schema`);
      }
      if (op.requestBody) {
        const body = follow(openapi, ptr("paths", p, method, "requestBody"));
        refs.set(`body_${id}`, refTo(`${body}/content/application~1json/schema`));
      }
      for (const status of Object.keys(op.responses ?? {})) {
        const r = follow(openapi, ptr("paths", p, method, "responses", status));
        if (at(openapi, r).content?.["application/json"]?.schema) {
          refs.set(`response_${id}_${status}`, refTo(`${r}/content/application~1json/schema`));
        }
      }
    }
  }
  for (const [key, pointer] of headers) refs.set(`header_${key}`, refTo(pointer));
  return refs;
}

function framesReference(): Map<string, ValidateFunction> {
  const ajv = freshAjv();
  ajv.addSchema(events as AnySchemaObject);
  return new Map(Object.keys(events.$defs).map((k) => [k, ajv.getSchema(`${events.$id}#/$defs/${k}`)!]));
}

// ------------------------------------------------------------- values
/** Every example either document carries (schema examples, media-type examples). */
function documentExamples(node: unknown, out: unknown[] = []): unknown[] {
  if (Array.isArray(node)) node.forEach((n) => documentExamples(n, out));
  else if (node && typeof node === "object") {
    for (const [k, v] of Object.entries(node)) {
      if (k === "example") out.push(v);
      else if (k === "examples" && Array.isArray(v)) out.push(...v);
      else if (k === "examples" && v && typeof v === "object") {
        for (const e of Object.values<Any>(v)) if (e && "value" in e) out.push(e.value);
      }
      documentExamples(v, out);
    }
  }
  return out;
}

const TIMES = [
  "2026-09-17T10:00:00Z",
  "2026-09-17T10:00:00.123456789Z",
  "2026-09-17T10:00:00.1234567890Z",
  "2026-09-17T10:00:00.000+00:00",
  "2026-09-17T10:00:00.000z",
  "2026-09-17t10:00:00.000Z",
  "2026-09-17 10:00:00.000Z",
  "2026-02-30T10:00:00.000Z",
  "2026-13-01T10:00:00.000Z",
  "2026-09-17T24:00:00.000Z",
  "2026-09-17T23:59:60.000Z",
  "2026-12-31T23:59:60Z",
  "2026-09-17T10:60:00.000Z",
  "2026-09-17T10:00:00.Z",
  "2026-09-17",
];
const UINTS = [
  "0",
  "1",
  "00",
  "012",
  "-1",
  "+1",
  "1.0",
  "1e3",
  " 1",
  "18446744073709551615",
  "18446744073709551616",
  "99999999999999999999",
];
const STRINGS = ["", " ", "a", "A", "0", "null", "\u00e9", "\u{1F600}", "a\tb", "x".repeat(43), ...TIMES, ...UINTS];

/** Near misses of one value: type changes, boundary lengths and numbers, textual nudges. */
function variants(v: unknown): unknown[] {
  const out: unknown[] = [null, true, 0, "", [], {}];
  if (typeof v === "string") {
    out.push(v + " ", " " + v, v.toUpperCase(), v.toLowerCase(), v.slice(1), v.slice(0, -1), v + "0", v + v, "0" + v);
    for (const c of ["=", ".", "9", "A", "B", "g", "G", "z", "_"]) out.push(v.slice(0, -1) + c, c + v.slice(1));
    out.push(v.replace(/[0-9]/, "g"), v.replace(/\.\d+Z$/, "Z"));
    for (const n of [1, 42, 43, 44, 63, 64, 65, 127, 128, 129, 255, 256, 1024, 1025])
      out.push("a".repeat(n), "A".repeat(n));
    out.push(...TIMES, ...UINTS);
  } else if (typeof v === "number") {
    out.push(v + 1, v - 1, v + 0.5, -v, String(v), 1, 100, 101, 1000000, 1000001, -1, 2 ** 53);
  } else if (typeof v === "boolean") {
    out.push(!v, String(v));
  } else if (Array.isArray(v)) {
    out.push([...v, ...v], v.slice(1), [null]);
  }
  return out;
}

/** The value with each leaf or member removed, extended or replaced by a near miss. */
function* mutations(v: unknown, depth = 0): Generator<unknown> {
  for (const x of variants(v)) yield x;
  if (depth > 6) return;
  if (Array.isArray(v)) {
    for (const [i, item] of v.entries())
      for (const m of mutations(item, depth + 1)) yield v.map((x, j) => (j === i ? m : x));
  } else if (v && typeof v === "object") {
    const o = v as Record<string, unknown>;
    yield { ...o, unknown_field: 1 };
    for (const k of Object.keys(o)) {
      const { [k]: _, ...rest } = o;
      yield rest;
      for (const m of mutations(o[k], depth + 1)) yield { ...o, [k]: m };
    }
  }
}

function compare(
  name: string,
  generated: Fn,
  reference: ValidateFunction,
  seeds: unknown[],
): { accepted: number; checked: number } {
  let accepted = 0;
  let checked = 0;
  const check = (value: unknown) => {
    checked += 1;
    const g = generated(value);
    const r = reference(value);
    assert.equal(
      g,
      r,
      `${name}: generated says ${g}, the contract says ${r} for ${JSON.stringify(value)?.slice(0, 2000)}`,
    );
    return g;
  };
  for (const seed of seeds) {
    if (!check(seed)) continue;
    accepted += 1;
    for (const m of mutations(seed)) check(m);
  }
  return { accepted, checked };
}

const uniq = (xs: unknown[]) => [...new Map(xs.map((x) => [JSON.stringify(x), x])).values()];

describe("generated validators agree with a fresh ajv on the contract", function () {
  this.timeout(120000);
  const envelope = (data: unknown) => ({ request_id: "22222222222222222222222222222222", data });
  // Readiness is the one response body with no example in the contract.
  const docExamples = [
    ...documentExamples(openapi),
    ...documentExamples(events),
    ...specExamples,
    { status: "ready", migration: 3 },
  ];
  const seeds = uniq([...docExamples, ...docExamples.map(envelope), ...STRINGS]);

  it("finds examples to start from", () => {
    assert.ok(docExamples.length >= 60, `only ${docExamples.length} examples`);
  });

  it("frames: every $defs entry, every example and its near misses", () => {
    const reference = framesReference();
    const generated = frames as unknown as Record<string, Fn>;
    assert.deepEqual(Object.keys(generated).sort(), [...reference.keys()].sort());
    let accepted = 0;
    for (const [k, ref] of reference) accepted += compare(k, generated[k]!, ref, seeds).accepted;
    assert.ok(accepted >= 30, `only ${accepted} accepted seeds`);
  });

  it("HTTP: every body, parameter set, header and response schema, every example and its near misses", () => {
    const reference = httpReference();
    const generated = http as unknown as Record<string, Fn>;
    assert.deepEqual(Object.keys(generated).sort(), [...reference.keys()].sort());
    const starved: string[] = [];
    for (const [k, ref] of reference) if (compare(k, generated[k]!, ref, seeds).accepted === 0) starved.push(k);
    // Parameter objects have no example of their own; they are covered below.
    assert.deepEqual(
      starved.filter((k) => !/^(path|query)_/.test(k)),
      [],
    );
  });

  it("HTTP: path and query parameter sets and their near misses", () => {
    const reference = httpReference();
    const generated = http as unknown as Record<string, Fn>;
    const id = "22222222222222222222222222222222";
    const paramSeeds = [
      { id },
      { id, delivery_id: id },
      { attempt_id: id },
      {},
      { limit: 20 },
      { queue_id: id, limit: 1, cursor: "abc_-" },
      { limit: 100, cursor: "A".repeat(1024), state: "PENDING" },
    ];
    for (const [k, ref] of reference) {
      if (!/^(path|query)_/.test(k)) continue;
      assert.ok(compare(k, generated[k]!, ref, paramSeeds).accepted > 0, `${k}: no seed accepted`);
    }
  });
});

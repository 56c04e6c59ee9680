// The contract documents against the protocol's own examples.
//
// - Every ```json block of docs/protocol.md is classified: WebSocket frames
//   by `type` (client: events.hello, events.ping, event.ack; server: events.welcome,
//   event.deliver, ack, error) must validate against their direction's $defs in
//   events.schema.json and fail against the other direction; the HTTP examples (create
//   request/response, configure, retry) must validate against openapi.yaml.
// - EventDelivery and ResultEvent (and the primitives they use) are deep-equal in both
//   documents after rewriting refs.
// - Negative cases for the constraints the schemas are meant to carry.
// - Every example embedded in either document validates against its own schema.
//
// Files are read relative to process.cwd() (the repository root when mocha runs).
import { strict as assert } from "node:assert";
import { existsSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { Ajv2020 } from "ajv/dist/2020.js";
import type { AnySchemaObject, ValidateFunction } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import { parse as parseYaml } from "yaml";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

const ROOT = process.cwd();
const SPEC_PATH = resolve(ROOT, "docs/protocol.md");
const EVENTS_PATH = resolve(ROOT, "events.schema.json");
const OPENAPI_PATH = resolve(ROOT, "openapi.yaml");

const HTTP_ID = "orbit-http";
const OAS_PREFIX = "#/components/schemas/";
const DEFS_PREFIX = "#/$defs/";

const CLIENT_TYPES = ["events.hello", "events.ping", "event.ack"] as const;
const SERVER_TYPES = ["events.welcome", "event.deliver", "ack", "error"] as const;
const SHARED = ["EventDelivery", "ResultEvent"] as const;

function isObject(v: unknown): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function obj(v: unknown, what: string): JsonObject {
  assert.ok(isObject(v), `${what} is not an object`);
  return v;
}

function clone<T>(v: T): T {
  return JSON.parse(JSON.stringify(v)) as T;
}

/** Deep copy with every `$ref` starting with `from` rewritten to start with `to`. */
function rewriteRefs(v: Json, from: string, to: string): Json {
  if (Array.isArray(v)) return v.map((x) => rewriteRefs(x, from, to));
  if (!isObject(v)) return v;
  const out: JsonObject = {};
  for (const [k, x] of Object.entries(v)) {
    out[k] =
      k === "$ref" && typeof x === "string" && x.startsWith(from)
        ? to + x.slice(from.length)
        : rewriteRefs(x, from, to);
  }
  return out;
}

/** The ```json blocks of a markdown text, parsed. */
function jsonBlocks(markdown: string): Json[] {
  const blocks: Json[] = [];
  for (const m of markdown.matchAll(/^```json[ \t]*\r?\n([\s\S]*?)^```/gm)) {
    blocks.push(JSON.parse(m[1] ?? "") as Json);
  }
  return blocks;
}

function errorsOf(v: ValidateFunction): string {
  return JSON.stringify(v.errors ?? [], null, 1);
}

// ---------------------------------------------------------------- documents
const events = obj(JSON.parse(readFileSync(EVENTS_PATH, "utf8")), "events.schema.json");
const openapi = obj(parseYaml(readFileSync(OPENAPI_PATH, "utf8")), "openapi.yaml");
const eventDefs = obj(events["$defs"], "events $defs");
const components = obj(openapi["components"], "components");
const oasSchemas = obj(components["schemas"], "components.schemas");
const specText = existsSync(SPEC_PATH) ? readFileSync(SPEC_PATH, "utf8") : undefined;
const specBlocks = specText === undefined ? [] : jsonBlocks(specText);

function newAjv(): Ajv2020 {
  const ajv = new Ajv2020({ strict: true, discriminator: true, allErrors: false });
  addFormatsModule.default(ajv);
  return ajv;
}

const eventsAjv = newAjv();
eventsAjv.addSchema(events as AnySchemaObject);
const eventsId = String(events["$id"]);

const httpAjv = newAjv();
httpAjv.addSchema({
  $id: HTTP_ID,
  $defs: rewriteRefs(oasSchemas, OAS_PREFIX, `${HTTP_ID}${DEFS_PREFIX}`),
} as AnySchemaObject);

function eventDef(name: string): ValidateFunction {
  const v = eventsAjv.getSchema(`${eventsId}${DEFS_PREFIX}${name}`);
  assert.ok(v, `events.schema.json has no $defs/${name}`);
  return v;
}

function httpDef(name: string): ValidateFunction {
  const v = httpAjv.getSchema(`${HTTP_ID}${DEFS_PREFIX}${name}`);
  assert.ok(v, `openapi.yaml has no components.schemas.${name}`);
  return v;
}

let inlineCount = 0;
/** Compiles a schema found inline in openapi.yaml (e.g. a response envelope). */
function httpInline(schema: Json): ValidateFunction {
  inlineCount += 1;
  const s = rewriteRefs(schema, OAS_PREFIX, `${HTTP_ID}${DEFS_PREFIX}`);
  return httpAjv.compile({ $id: `${HTTP_ID}-inline-${inlineCount}`, ...obj(s, "inline schema") } as AnySchemaObject);
}

function passes(v: ValidateFunction, value: unknown, what: string): void {
  assert.ok(v(value), `${what} should validate: ${errorsOf(v)}`);
}

function fails(v: ValidateFunction, value: unknown, what: string): void {
  assert.equal(v(value), false, `${what} should NOT validate`);
}

/** The media-type schema of an operation's response. */
function responseSchema(path: string, method: string, status: string): Json {
  const paths = obj(openapi["paths"], "paths");
  const op = obj(obj(paths[path], path)[method], `${method} ${path}`);
  const res = obj(obj(op["responses"], "responses")[status], `${status} of ${method} ${path}`);
  const media = obj(obj(res["content"], "content")["application/json"], "application/json");
  return media["schema"] ?? null;
}

// ---------------------------------------------------------------- docs/protocol.md examples
const specFrame = (type: string): JsonObject => {
  const f = specBlocks.find((b) => isObject(b) && b["type"] === type);
  assert.ok(f && isObject(f), `docs/protocol.md has no ${type} example`);
  return clone(f);
};

type HttpKind = "createRequest" | "createResponse" | "configureRequest" | "retryRequest";

function httpKind(b: JsonObject): HttpKind | undefined {
  if ("request_id" in b && "data" in b) return "createResponse";
  if ("additional_attempts" in b) return "retryRequest";
  if ("expected_revision" in b && "enabled" in b) return "configureRequest";
  if ("name" in b && "queue_id" in b) return "createRequest";
  return undefined;
}

describe("contract: docs/protocol.md examples", () => {
  it("reads docs/protocol.md and finds its json examples", () => {
    assert.ok(specText !== undefined, `docs/protocol.md not found at ${SPEC_PATH}`);
    // 4 HTTP examples + 6 frame examples (hello, welcome, deliver, event.ack, ack, ping)
    assert.ok(specBlocks.length >= 10, `only ${specBlocks.length} json blocks found`);
  });

  it("classifies every json block and covers every frame type and HTTP example", () => {
    assert.ok(specText !== undefined, `docs/protocol.md not found at ${SPEC_PATH}`);
    const seen = new Set<string>();
    for (const [i, b] of specBlocks.entries()) {
      const o = obj(b, `json block ${i}`);
      if (typeof o["type"] === "string" && "protocol_version" in o) {
        const t = o["type"];
        assert.ok(
          (CLIENT_TYPES as readonly string[]).includes(t) || (SERVER_TYPES as readonly string[]).includes(t),
          `json block ${i} has unknown frame type ${t}`,
        );
        seen.add(t);
      } else {
        const k = httpKind(o);
        assert.ok(k, `json block ${i} is neither a frame nor a known HTTP example: ${JSON.stringify(o)}`);
        seen.add(k);
      }
    }
    for (const t of [...CLIENT_TYPES, "events.welcome", "event.deliver", "ack"])
      assert.ok(seen.has(t), `no ${t} example`);
    for (const k of ["createRequest", "createResponse", "configureRequest", "retryRequest"])
      assert.ok(seen.has(k), `no ${k} example`);
  });

  for (const [i, b] of specBlocks.entries()) {
    if (!isObject(b) || typeof b["type"] !== "string" || !("protocol_version" in b)) continue;
    const type = b["type"];
    const client = (CLIENT_TYPES as readonly string[]).includes(type);
    const own = client ? "clientFrame" : "serverFrame";
    const other = client ? "serverFrame" : "clientFrame";
    it(`frame example #${i} (${type}) is a valid ${own} and not a ${other}`, () => {
      passes(eventDef(own), b, `${type} as ${own}`);
      fails(eventDef(other), b, `${type} as ${other}`);
      passes(eventsAjv.getSchema(eventsId) as ValidateFunction, b, `${type} against the root schema`);
    });
  }

  for (const [i, b] of specBlocks.entries()) {
    if (!isObject(b) || "protocol_version" in b) continue;
    const kind = httpKind(b);
    it(`HTTP example #${i} (${kind ?? "unknown"}) validates against openapi.yaml`, () => {
      switch (kind) {
        case "createRequest":
          passes(httpDef("CreateSubscriptionRequest"), b, "create request");
          break;
        case "createResponse":
          passes(httpInline(responseSchema("/v1/subscriptions", "post", "201")), b, "createSubscription 201 body");
          passes(httpDef("SubscriptionResult"), b["data"], "create response data");
          passes(httpDef("Subscription"), obj(b["data"], "data")["subscription"], "subscription");
          break;
        case "configureRequest":
          passes(httpDef("ConfigureSubscriptionRequest"), b, "configure request");
          break;
        case "retryRequest":
          passes(httpDef("RetryEventDeliveryRequest"), b, "retry request");
          break;
        default:
          assert.fail(`unclassified HTTP example ${JSON.stringify(b)}`);
      }
    });
  }
});

// ---------------------------------------------------------------- shared definitions
describe("contract: definitions shared by openapi.yaml and events.schema.json", () => {
  for (const name of SHARED) {
    it(`${name} is deep-equal in both documents after ref rewriting`, () => {
      const fromOas = rewriteRefs(oasSchemas[name] ?? null, OAS_PREFIX, DEFS_PREFIX);
      assert.ok(fromOas !== null, `openapi.yaml lacks ${name}`);
      assert.deepStrictEqual(fromOas, eventDefs[name]);
    });
  }

  it("every definition EventDelivery and ResultEvent refer to is deep-equal too", () => {
    const pending: string[] = [...SHARED];
    const done = new Set<string>();
    while (pending.length > 0) {
      const name = pending.pop() as string;
      if (done.has(name)) continue;
      done.add(name);
      const def = eventDefs[name];
      assert.ok(def !== undefined, `events.schema.json lacks $defs/${name}`);
      assert.deepStrictEqual(rewriteRefs(oasSchemas[name] ?? null, OAS_PREFIX, DEFS_PREFIX), def, `${name} differs`);
      for (const m of JSON.stringify(def).matchAll(/"\$ref":"#\/\$defs\/([A-Za-z0-9_]+)"/g)) pending.push(m[1] ?? "");
    }
    assert.ok(done.has("Id") && done.has("Uint64String") && done.has("Timestamp"));
  });

  it("ErrorCode and LeaseSecret are the same in both documents", () => {
    assert.deepStrictEqual(oasSchemas["ErrorCode"], eventDefs["ErrorCode"]);
    assert.deepStrictEqual(oasSchemas["LeaseSecret"], eventDefs["LeaseSecret"]);
  });

  it("refs are only #/$defs/X in events.schema.json and #/components/... in openapi.yaml", () => {
    for (const m of JSON.stringify(events).matchAll(/"\$ref":"([^"]*)"/g)) {
      assert.match(m[1] ?? "", /^#\/\$defs\/[A-Za-z0-9_]+$/);
    }
    for (const m of JSON.stringify(oasSchemas).matchAll(/"\$ref":"([^"]*)"/g)) {
      assert.match(m[1] ?? "", /^#\/components\/schemas\/[A-Za-z0-9_]+$/);
    }
  });
});

// ---------------------------------------------------------------- negative cases
describe("contract: negative cases", () => {
  const clientFrame = () => eventDef("clientFrame");
  const serverFrame = () => eventDef("serverFrame");

  it("a hello carrying session_id fails (and one with reply_to or error)", () => {
    const hello = specFrame("events.hello");
    passes(clientFrame(), hello, "docs/protocol.md hello");
    fails(clientFrame(), { ...hello, session_id: "44444444444444444444444444444444" }, "hello with session_id");
    fails(clientFrame(), { ...hello, reply_to: "44444444444444444444444444444444" }, "hello with reply_to");
    fails(clientFrame(), { ...hello, error: { code: "INTERNAL", message: "x" } }, "hello with error");
  });

  it("hello capacity must be an integer 1-32", () => {
    const hello = specFrame("events.hello");
    const body = obj(hello["body"], "body");
    for (const c of [0, 33, 1.5, "1"])
      fails(clientFrame(), { ...hello, body: { ...body, capacity: c } }, `capacity ${c}`);
    passes(clientFrame(), { ...hello, body: { ...body, capacity: 32 } }, "capacity 32");
  });

  it("an error frame with a body fails; without reply_to/session_id it passes", () => {
    const error = {
      protocol_version: "1",
      type: "error",
      message_id: "12121212121212121212121212121212",
      error: { code: "UNAVAILABLE", message: "temporarily unavailable; retry" },
    };
    passes(serverFrame(), error, "background error frame");
    fails(serverFrame(), { ...error, body: {} }, "error frame with body");
    fails(serverFrame(), { ...error, error: { code: "NOPE", message: "x" } }, "unknown error code");
    fails(clientFrame(), error, "error frame as a client frame");
  });

  it("client frames never carry error", () => {
    fails(clientFrame(), { ...specFrame("events.ping"), error: { code: "INTERNAL", message: "x" } }, "ping with error");
  });

  it("an event.ack without session_id fails", () => {
    const ack = specFrame("event.ack");
    delete ack["session_id"];
    fails(clientFrame(), ack, "event.ack without session_id");
  });

  it("a ping body must be {}", () => {
    fails(clientFrame(), { ...specFrame("events.ping"), body: { x: 1 } }, "ping with a non-empty body");
  });

  it("a ping reply ack validates; an ack without reply_to fails", () => {
    const reply = {
      protocol_version: "1",
      type: "ack",
      message_id: "99999999999999999999999999999999",
      reply_to: "ffffffffffffffffffffffffffffffff",
      session_id: "44444444444444444444444444444444",
      body: { server_time: "2026-09-17T10:00:15.000Z", enabled: true },
    };
    passes(serverFrame(), reply, "ping reply");
    const noReply: JsonObject = { ...reply };
    delete noReply["reply_to"];
    fails(serverFrame(), noReply, "ack without reply_to");
  });

  it("an event.deliver whose delivery is LEASED without lease_until fails", () => {
    const deliver = specFrame("event.deliver");
    const body = obj(deliver["body"], "body");
    const delivery = obj(body["delivery"], "delivery");
    delete delivery["lease_until"];
    fails(serverFrame(), deliver, "deliver without lease_until");
    fails(eventDef("EventDelivery"), delivery, "LEASED delivery without lease_until");
  });

  it("an event.deliver whose delivery is not LEASED fails", () => {
    const deliver = specFrame("event.deliver");
    const delivery = obj(obj(deliver["body"], "body")["delivery"], "delivery");
    delivery["state"] = "PENDING";
    delete delivery["lease_until"];
    passes(eventDef("EventDelivery"), delivery, "PENDING delivery");
    fails(serverFrame(), deliver, "deliver with a PENDING delivery");
  });

  it("lease_until and acknowledged_at appear exactly in their states", () => {
    const leased = obj(obj(specFrame("event.deliver")["body"], "body")["delivery"], "delivery");
    const { lease_until: _unused, ...base } = leased;
    const acked = { ...base, state: "ACKED", acknowledged_at: "2026-09-17T10:00:01Z" };
    for (const v of [eventDef("EventDelivery"), httpDef("EventDelivery")]) {
      passes(v, acked, "ACKED with acknowledged_at");
      fails(v, { ...base, state: "ACKED" }, "ACKED delivery without acknowledged_at");
      fails(v, { ...acked, lease_until: "2026-09-17T10:00:30Z" }, "ACKED with lease_until");
      passes(v, { ...base, state: "EXPIRED" }, "EXPIRED");
      fails(v, { ...base, state: "EXPIRED", lease_until: "2026-09-17T10:00:30Z" }, "EXPIRED with lease_until");
      fails(v, { ...leased, acknowledged_at: "2026-09-17T10:00:01Z" }, "LEASED with acknowledged_at");
      fails(v, { ...base, state: "PENDING", attempt_budget: 1000001 }, "budget over 1000000");
      fails(v, { ...base, state: "PENDING", attempts: -1 }, "negative attempts");
    }
  });

  it("uint64 strings: the full range, canonical only", () => {
    for (const v of [eventDef("Uint64String"), httpDef("Uint64String")]) {
      for (const s of ["0", "1", "12", "9999999999999999999", "10000000000000000000", "18446744073709551615"])
        passes(v, s, s);
      for (const s of [
        "18446744073709551616",
        "18446744073709551620",
        "99999999999999999999",
        "01",
        "00",
        "-1",
        "+1",
        "1.0",
        "1e3",
        " 1",
        "",
        "184467440737095516150",
      ]) {
        fails(v, s, JSON.stringify(s));
      }
      fails(v, 1, "a JSON number");
    }
  });

  it("lease secrets: canonical 32-byte base64url only", () => {
    const good = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    for (const v of [eventDef("LeaseSecret"), httpDef("LeaseSecret")]) {
      passes(v, good, "all-zero secret");
      passes(v, `${"_".repeat(42)}8`, "max canonical secret");
      fails(v, `${good.slice(0, 42)}B`, "a secret ending in 'B' (non-zero trailing bits)");
      fails(v, `${good}A`, "44 characters");
      fails(v, good.slice(1), "42 characters");
      fails(v, `${good.slice(0, 42)}=`, "padding");
      fails(v, `+${good.slice(1)}`, "standard base64 alphabet");
    }
    const ack = specFrame("event.ack");
    obj(ack["body"], "body")["lease_secret"] = `${good.slice(0, 42)}B`;
    fails(clientFrame(), ack, "event.ack with a lease secret ending in 'B'");
  });

  it("timestamps are UTC with Z", () => {
    const v = httpDef("Timestamp");
    for (const s of ["2026-09-17T10:00:00Z", "2026-09-17T10:00:00.123Z", "2026-09-17T10:00:00.123456789Z"])
      passes(v, s, s);
    for (const s of [
      "2026-09-17T10:00:00+00:00",
      "2026-09-17 10:00:00Z",
      "2026-09-17T10:00:00.Z",
      "2026-13-17T10:00:00Z",
    ])
      fails(v, s, s);
  });

  it("result events: type and states agree; requeued is not a result type", () => {
    const event = obj(obj(specFrame("event.deliver")["body"], "body")["event"], "event");
    const v = eventDef("ResultEvent");
    passes(v, event, "docs/protocol.md event");
    fails(v, { ...event, type: "task.succeeded" }, "type/state mismatch");
    fails(v, { ...event, type: "task.requeued" }, "task.requeued");
    fails(v, { ...event, details: { state: "CANCELLED", reason: "cancel_requested" } }, "lower-case reason");
    fails(v, { ...event, aggregate_kind: "queue" }, "aggregate_kind");
    const snapshot = obj(event["snapshot"], "snapshot");
    passes(
      v,
      {
        ...event,
        snapshot: {
          ...snapshot,
          result: '{"n":12345678901234567890}',
          current_attempt_id: "abababababababababababababababab",
        },
      },
      "snapshot with result",
    );
    fails(v, { ...event, snapshot: { ...snapshot, result: { n: 1 } } }, "snapshot result as an object");
    fails(v, { ...event, snapshot: { ...snapshot, schema_version: 2 } }, "schema_version 2");
  });

  it("create request: types subset of the four, limits, from_sequence", () => {
    const v = httpDef("CreateSubscriptionRequest");
    const base = { name: "object-results", queue_id: "11111111111111111111111111111111" };
    passes(v, base, "minimal create");
    passes(v, { ...base, types: [], from_sequence: null, max_pending: 0, max_attempts: 0 }, "defaults spelled out");
    passes(v, { ...base, from_sequence: "0", max_pending: 1000, max_attempts: 100 }, "upper limits");
    fails(v, { ...base, types: ["task.requeued"] }, "task.requeued");
    fails(v, { ...base, types: ["task.failed", "task.failed"] }, "duplicate types");
    fails(v, { ...base, max_pending: 1001 }, "max_pending 1001");
    fails(v, { ...base, max_attempts: 101 }, "max_attempts 101");
    fails(v, { ...base, from_sequence: 0 }, "from_sequence as a number");
    fails(v, { ...base, namespace_id: "11111111111111111111111111111111" }, "a self-declared namespace_id");
    fails(v, { ...base, Name: "x" }, "a case-variant alias");
    fails(v, { ...base, name: "-bad" }, "a name starting with -");
    fails(v, { ...base, name: "a".repeat(129) }, "a 129-character name");
  });

  it("configure and retry requests need all their fields", () => {
    const c = httpDef("ConfigureSubscriptionRequest");
    fails(c, { expected_revision: "1", enabled: false }, "configure without reason");
    fails(c, { expected_revision: "1", enabled: false, reason: "" }, "configure with an empty reason");
    passes(c, { expected_revision: "1", enabled: true, reason: "维".repeat(1024) }, "1024 Unicode characters");
    fails(c, { expected_revision: "1", enabled: true, reason: "x".repeat(1025) }, "1025 characters");
    const r = httpDef("RetryEventDeliveryRequest");
    fails(r, { expected_revision: "3", reason: "x" }, "retry without additional_attempts");
    fails(r, { expected_revision: "3", reason: "x", additional_attempts: 0 }, "additional_attempts 0");
    fails(r, { expected_revision: "3", reason: "x", additional_attempts: 101 }, "additional_attempts 101");
  });

  it("Idempotency-Key: 1-128 printable ASCII, no edge spaces", () => {
    const parameters = obj(components["parameters"], "components.parameters");
    const v = httpInline(obj(parameters["IdempotencyKey"], "IdempotencyKey")["schema"] ?? null);
    for (const k of ["a", "a b", "~", "x".repeat(128), "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"])
      passes(v, k, JSON.stringify(k));
    for (const k of ["", " a", "a ", "x".repeat(129), "é", "a\tb", "a\nb"]) fails(v, k, JSON.stringify(k));
  });
});

// ---------------------------------------------------------------- embedded examples
describe("contract: examples embedded in the documents", () => {
  it("every $defs example in events.schema.json validates against its definition", () => {
    let n = 0;
    for (const [name, def] of Object.entries(eventDefs)) {
      const examples = isObject(def) ? def["examples"] : undefined;
      if (!Array.isArray(examples)) continue;
      for (const e of examples) {
        passes(eventDef(name), e, `$defs/${name} example`);
        n += 1;
      }
    }
    assert.ok(n >= 8, `only ${n} examples`);
  });

  it("every media-type example in openapi.yaml validates against its schema", () => {
    let n = 0;
    const check = (media: JsonObject, where: string): void => {
      const examples = media["examples"];
      if (!isObject(examples)) return;
      const v = httpInline(media["schema"] ?? null);
      for (const [k, e] of Object.entries(examples)) {
        passes(v, obj(e, k)["value"], `${where} example ${k}`);
        n += 1;
      }
    };
    for (const [path, item] of Object.entries(obj(openapi["paths"], "paths"))) {
      for (const [method, op] of Object.entries(obj(item, path))) {
        if (!isObject(op) || !("operationId" in op)) continue;
        const where = `${method.toUpperCase()} ${path}`;
        const rb = op["requestBody"];
        if (isObject(rb)) check(obj(obj(rb["content"], "content")["application/json"], "json"), `${where} request`);
        for (const [status, res] of Object.entries(obj(op["responses"], "responses"))) {
          const content = isObject(res) ? res["content"] : undefined;
          if (isObject(content) && isObject(content["application/json"]))
            check(content["application/json"], `${where} ${status}`);
        }
      }
    }
    for (const [name, res] of Object.entries(obj(components["responses"], "responses"))) {
      check(obj(obj(obj(res, name)["content"], "content")["application/json"], "json"), `responses.${name}`);
    }
    assert.ok(n >= 20, `only ${n} examples`);
  });

  it("every delivery in an example has a revision its history allows: each claim, recovery, ACK and retry moves it (§4)", () => {
    // A claim moves revision and lease_epoch together; a PENDING delivery is claimed again
    // only after a recovery (or a retry) moved the revision once more; ACK and recovery
    // after the last claim move it again. So a delivery at epoch e > 0 has a revision of
    // at least 2e when LEASED, 2e + 1 otherwise; at epoch 0, at least 1.
    const deliveries: [string, JsonObject][] = [];
    const walk = (v: Json, where: string): void => {
      if (Array.isArray(v)) v.forEach((x, i) => walk(x, `${where}[${i}]`));
      else if (isObject(v)) {
        if (typeof v["lease_epoch"] === "string" && typeof v["revision"] === "string" && typeof v["state"] === "string")
          deliveries.push([where, v]);
        for (const [k, x] of Object.entries(v)) walk(x, `${where}.${k}`);
      }
    };
    walk(openapi, "openapi.yaml");
    walk(events, "events.schema.json");
    assert.ok(deliveries.length >= 4, `only ${deliveries.length} deliveries`);
    for (const [where, d] of deliveries) {
      const epoch = BigInt(String(d["lease_epoch"]));
      const least = epoch === 0n ? 1n : d["state"] === "LEASED" ? 2n * epoch : 2n * epoch + 1n;
      assert.ok(
        BigInt(String(d["revision"])) >= least,
        `${where}: revision ${d["revision"]} at lease_epoch ${epoch} (${d["state"]}); at least ${least}`,
      );
    }
  });

  it("the getCurrentCredential example is in the order the server answers: actions sorted, queues by name", () => {
    const get = obj(obj(obj(openapi["paths"], "paths")["/v1/credential"], "/v1/credential")["get"], "get");
    const media = obj(
      obj(obj(obj(get["responses"], "responses")["200"], "200")["content"], "content")["application/json"],
      "json",
    );
    for (const [k, e] of Object.entries(obj(media["examples"], "examples"))) {
      const data = obj(obj(obj(e, k)["value"], "value")["data"], "data");
      const actions = data["actions"] as string[];
      assert.deepEqual(actions, [...actions].sort(), `example ${k}: actions`);
      const names = (data["queues"] as JsonObject[]).map((q) => String(q["name"]));
      assert.deepEqual(names, [...names].sort(), `example ${k}: queues`);
    }
  });
});

// ---------------------------------------------------------------- conventions
describe("contract: conventions", () => {
  it("every object schema (one with properties) has additionalProperties: false", () => {
    const walk = (v: Json, where: string, conditional: boolean): void => {
      if (Array.isArray(v)) {
        v.forEach((x, i) => walk(x, `${where}/${i}`, conditional));
        return;
      }
      if (!isObject(v)) return;
      if (!conditional && v["type"] === "object" && "properties" in v && !("$ref" in v)) {
        assert.equal(v["additionalProperties"], false, `${where} lacks additionalProperties: false`);
      }
      for (const [k, x] of Object.entries(v)) {
        if (k === "examples" || k === "example") continue;
        // if/then/else/not/allOf members refine an object defined elsewhere; they add no properties.
        walk(x, `${where}/${k}`, conditional || ["if", "then", "else", "not", "allOf"].includes(k));
      }
    };
    walk(events, "events.schema.json#", false);
    walk(components, "openapi.yaml#/components", false);
    walk(obj(openapi["paths"], "paths"), "openapi.yaml#/paths", false);
  });

  it("frame unions are discriminated by type", () => {
    for (const [union, members] of [
      ["clientFrame", CLIENT_TYPES],
      ["serverFrame", SERVER_TYPES],
    ] as const) {
      const def = obj(eventDefs[union], union);
      assert.deepStrictEqual(def["discriminator"], { propertyName: "type" });
      const oneOf = def["oneOf"];
      assert.ok(Array.isArray(oneOf));
      const types = oneOf.map((r) => {
        const ref = String(obj(r, "branch")["$ref"]).replace(DEFS_PREFIX, "");
        const branch = obj(eventDefs[ref], ref);
        const required = branch["required"];
        assert.ok(Array.isArray(required) && required.includes("type"), `${ref} does not require type`);
        return obj(obj(branch["properties"], "properties")["type"], "type")["const"];
      });
      assert.deepStrictEqual(types, [...members]);
    }
  });
});

// Property-based fuzzing (fast-check) of a real `orbit serve`: HTTP
// bodies, headers and query strings, and WebSocket frames — random JSON, near-valid
// input (one field replaced, an extra key, a case-variant key, a duplicate key), huge
// numbers, out-of-range uint64 strings, bad base64url, random unicode, truncated JSON,
// random bytes and oversize input. The properties: the node never crashes and never
// answers 5xx; every HTTP answer is the envelope with X-Request-ID and no-store (and
// matches the contract of its operation); every WebSocket frame passes the contract and
// the connection either stays open (and still answers a ping) or closes with the
// specified code; no log line holds a stack trace, an error or a secret.
//
// The test command runs about 5,600 cases; `npm run fuzz` runs 20 times as many (about
// 112,000; ORBIT_FUZZ_SCALE sets another multiple). ORBIT_FUZZ_SEED fixes
// fast-check's seed (it prints the seed of a failing run); ORBIT_FUZZ_LOG=1 prints the
// node's non-request log lines at the end.
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import http from "node:http";
import type { Socket } from "node:net";
import fc from "fast-check";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { request, type RawResponse } from "../helpers/http.js";
import { client } from "../helpers/api.js";
import { assertCommonHeaders, assertContract } from "../helpers/contract.js";
import { connect, mid, type Frame, type TestSocket } from "../helpers/ws.js";
import { ERROR_CATALOGUE, type ErrorCode } from "../../src/wire/errors.js";

const SCALE = Math.max(0.05, Number(process.env.ORBIT_FUZZ_SCALE ?? "1") || 1);
const SEED = process.env.ORBIT_FUZZ_SEED === undefined ? undefined : Number(process.env.ORBIT_FUZZ_SEED);
const runs = (n: number): { numRuns: number; seed?: number } => ({
  numRuns: Math.max(1, Math.round(n * SCALE)),
  ...(SEED === undefined ? {} : { seed: SEED }),
});

const LIMIT = 512 * 1024;
const SESSION = "@@SESSION@@";
const SESSION_UPPER = "@@SESSION_UPPER@@";
const rid = (): string => randomBytes(16).toString("hex");

// ---------------------------------------------------------------------------------------
// Building blocks: raw JSON text fragments that JSON.stringify cannot produce.

/** Numbers the strict parser must refuse or keep exactly. */
const HUGE_NUMBERS = [
  "1e400",
  "-1e400",
  "1E+999",
  "2e308",
  "1e-400",
  "4.9e-325",
  "-0",
  "0.0",
  "1.0",
  "1e2",
  "1E0",
  "0e0",
  "123456789012345678901234567890",
  "-123456789012345678901234567890",
  "18446744073709551616",
  "18446744073709551615",
  "9007199254740993",
  "340282366920938463463374607431768211456",
  `0.${"0".repeat(400)}1`,
  "9".repeat(1000),
  `1${"0".repeat(400)}`,
  "100.000000000000001",
  "999.99999999999999999",
];
/** Strings in uint64 position that are not canonical counters, and a few that are. */
const UINT64_STRINGS = [
  "18446744073709551616",
  "18446744073709551615",
  "99999999999999999999999",
  "36893488147419103232",
  "-1",
  "01",
  "00",
  "1e3",
  " 1",
  "1 ",
  "0x10",
  "",
  "+1",
  "1.0",
  "١٢",
  "１",
  "0",
  "1",
  "2",
  "3",
  "9223372036854775808",
];
/** Not JSON at all, or JSON the strict parser refuses. */
const RAW_GARBAGE = [
  "NaN",
  "Infinity",
  "-Infinity",
  "undefined",
  "'x'",
  "01",
  ".5",
  "1.",
  "--1",
  "+1",
  "tru",
  "nul",
  "True",
  '"\\ud800"',
  '"\\udc00x"',
  '"\\ud83d\\ude00"',
  '"\\u00"',
  '"\\x41"',
  '"\\u0000"',
  '"a\u0000b"',
  '"\t"',
  '"\n"',
  '"\u2028"',
  "[1,]",
  "{,}",
  '{"a"}',
  '{"a":}',
  "[",
  "]",
  '"unterminated',
  "\u00a0 1",
  "/*c*/1",
  "0x1F",
];
/** Duplicate keys at some depth, spelled plainly or with escapes. */
const DUPLICATE_TEXT = [
  '{"a":1,"a":1}',
  '{"a":{"b":1,"b":2}}',
  '[{"k":1,"k":1}]',
  '{"a":1,"\\u0061":2}',
  '{"__proto__":1,"__proto__":2}',
  '{"__proto__":{"x":1}}',
  '{"constructor":{"prototype":{"x":1}}}',
  '{"":1,"":2}',
];
const deep = (n: number, open = "[", close = "]"): string => open.repeat(n) + close.repeat(n);
const NESTING = [
  deep(255),
  deep(256),
  deep(257),
  deep(1000),
  deep(100_000),
  `${'{"a":'.repeat(300)}1${"}".repeat(300)}`,
];

/** A raw JSON value as text, mostly valid JSON, often hostile. */
const valueText: fc.Arbitrary<string> = fc.oneof(
  { weight: 5, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v) ?? "null") },
  { weight: 2, arbitrary: fc.constantFrom(...HUGE_NUMBERS) },
  { weight: 2, arbitrary: fc.constantFrom(...UINT64_STRINGS).map((s) => JSON.stringify(s)) },
  { weight: 2, arbitrary: fc.string({ unit: "binary", maxLength: 40 }).map((s) => JSON.stringify(s)) },
  { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 20 }) },
  { weight: 1, arbitrary: fc.constantFrom(...RAW_GARBAGE) },
  { weight: 1, arbitrary: fc.constantFrom(...DUPLICATE_TEXT) },
  { weight: 1, arbitrary: fc.constantFrom(...NESTING) },
  {
    weight: 1,
    arbitrary: fc
      .oneof(fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }))
      .map((n) => JSON.stringify(n)),
  },
);

/** Random key names for "extra key" mutations. */
const keyName: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(
    "__proto__",
    "constructor",
    "toString",
    "hasOwnProperty",
    "",
    " ",
    "id",
    "data",
    "error",
    "request_id",
    "session_id",
    "reply_to",
    "extra",
  ),
  fc.string({ unit: "binary", maxLength: 12 }),
);

// ---------------------------------------------------------------------------------------
// Near-valid documents: a valid object, rendered as raw text with one mutation applied
// to one object in it (the top level or a nested object such as a frame's body).

type MutationOp = "none" | "replace" | "extra" | "case" | "delete" | "duplicate" | "escape" | "whitespace" | "reorder";

interface Mutation {
  readonly op: MutationOp;
  /** Picks the key (modulo the number of keys). */
  readonly index: number;
  readonly name: string;
  readonly value: string;
  /** Use a field-specific special value instead of `value` (when the field has some). */
  readonly useSpecial: boolean;
  readonly special: number;
  readonly variant: number;
}

const mutationArb: fc.Arbitrary<Mutation> = fc.record({
  op: fc.oneof(
    { weight: 1, arbitrary: fc.constant<MutationOp>("none") },
    { weight: 8, arbitrary: fc.constant<MutationOp>("replace") },
    { weight: 2, arbitrary: fc.constant<MutationOp>("extra") },
    { weight: 2, arbitrary: fc.constant<MutationOp>("case") },
    { weight: 2, arbitrary: fc.constant<MutationOp>("delete") },
    { weight: 2, arbitrary: fc.constant<MutationOp>("duplicate") },
    { weight: 1, arbitrary: fc.constant<MutationOp>("escape") },
    { weight: 1, arbitrary: fc.constant<MutationOp>("whitespace") },
    { weight: 1, arbitrary: fc.constant<MutationOp>("reorder") },
  ),
  index: fc.nat(),
  name: keyName,
  value: valueText,
  useSpecial: fc.boolean(),
  special: fc.nat(),
  variant: fc.nat(),
});

/** Field-specific values (raw text); `forced` fields never take a generic random value. */
interface Specials {
  readonly values: Readonly<Record<string, readonly string[]>>;
  readonly forced?: ReadonlySet<string>;
}

const WHITESPACE = [" ", "\t", "\n", "\r\n", "  \n\t ", "\u00a0", "\u2003", "\ufeff", "\u000b", "\f"];

function caseVariant(k: string, v: number): string {
  const variants = [
    k.toUpperCase(),
    k[0] ? k[0].toUpperCase() + k.slice(1) : "X",
    k.replace(/_/g, "-"),
    k.replace(/_(.)/g, (_, c: string) => c.toUpperCase()),
    `${k} `,
    ` ${k}`,
    `${k}\u0000`,
    k.replace(/i/g, "\u0130"),
  ];
  return variants[v % variants.length]!;
}

function escapeKey(k: string): string {
  return `"${[...k].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).join("")}"`;
}

function applyMutation(entries: [string, string, string][], m: Mutation, specials: Specials): [string, string][] {
  // entries: [plain key, key text, value text]
  const out: [string, string][] = entries.map(([, k, v]) => [k, v]);
  if (m.op === "extra" || entries.length === 0) {
    out.push([JSON.stringify(m.name), m.value]);
    return out;
  }
  const i = m.index % entries.length;
  const [plain, keyText, valText] = entries[i]!;
  const special = specials.values[plain];
  const chosen =
    special && (m.useSpecial || specials.forced?.has(plain)) ? special[m.special % special.length]! : m.value;
  switch (m.op) {
    case "none":
      break;
    case "replace":
      out[i] = [keyText, chosen];
      break;
    case "case":
      out[i] = [JSON.stringify(caseVariant(plain, m.variant)), valText];
      break;
    case "delete":
      out.splice(i, 1);
      break;
    case "duplicate":
      // Same key twice: with the same value (still a duplicate), with another one, or escaped.
      out.splice(m.variant % 2 === 0 ? i : i + 1, 0, [
        m.variant % 3 === 0 ? escapeKey(plain) : keyText,
        m.variant % 4 === 1 ? valText : chosen,
      ]);
      break;
    case "escape":
      out[i] = [escapeKey(plain), valText];
      break;
    case "whitespace": {
      const ws = WHITESPACE[m.variant % WHITESPACE.length]!;
      out[i] = [`${ws}${keyText}${ws}`, `${ws}${valText}${ws}`];
      break;
    }
    case "reorder":
      out.reverse();
      break;
  }
  return out;
}

/** Renders `value` as JSON text with the mutation applied to the object at `target`. */
function renderMutated(
  value: unknown,
  target: readonly string[],
  m: Mutation,
  specials: Specials,
  path: string[] = [],
): string {
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    const entries = Object.entries(value as Record<string, unknown>).map(([k, v]): [string, string, string] => [
      k,
      JSON.stringify(k),
      renderMutated(v, target, m, specials, [...path, k]),
    ]);
    const here = path.length === target.length && path.every((p, i) => p === target[i]);
    const rendered = here ? applyMutation(entries, m, specials) : entries.map(([, k, v]): [string, string] => [k, v]);
    return `{${rendered.map(([k, v]) => `${k}:${v}`).join(",")}}`;
  }
  // Into arrays too, so that a target may name an item (["items", "0"]).
  if (Array.isArray(value))
    return `[${value.map((v, i) => renderMutated(v, target, m, specials, [...path, String(i)])).join(",")}]`;
  return JSON.stringify(value);
}

// ---------------------------------------------------------------------------------------
// Invariants.

const CODES = new Set(Object.keys(ERROR_CATALOGUE));

/** Every HTTP answer: below 500, the envelope, the headers, and (with an operation) the contract. */
/** Status → count, for the summary line. */
const httpStatuses = new Map<number, number>();
/** How WebSocket cases ended: close code or answer type (and error code). */
const wsOutcomes = new Map<string, number>();
const tally = <K>(m: Map<K, number>, k: K): void => void m.set(k, (m.get(k) ?? 0) + 1);
const summary = <K>(m: Map<K, number>): string =>
  [...m]
    .sort((a, b) => b[1] - a[1])
    .map(([k, n]) => `${k}:${n}`)
    .join(" ");

function checkHttp(res: RawResponse, operationId: string | undefined, what: string): void {
  tally(httpStatuses, res.status);
  const ctx = `${what}\n→ ${res.status} ${res.text.slice(0, 500)}`;
  assert.ok(res.status < 500, `a 5xx answer: ${ctx}`);
  assertCommonHeaders(res);
  if (res.status === 204) {
    assert.equal(res.text, "", ctx);
    return;
  }
  assert.notEqual(res.json, undefined, `the body is not JSON: ${ctx}`);
  if (res.status >= 400) {
    assert.deepEqual(Object.keys(res.json).sort(), ["error", "request_id"], ctx);
    assert.deepEqual(Object.keys(res.json.error).sort(), ["code", "message"], ctx);
    assert.equal(typeof res.json.error.code, "string", ctx);
    assert.equal(typeof res.json.error.message, "string", ctx);
    assert.ok(CODES.has(res.json.error.code), `a code outside the catalogue: ${ctx}`);
    assert.equal(
      ERROR_CATALOGUE[res.json.error.code as ErrorCode].status,
      res.status,
      `code and status disagree: ${ctx}`,
    );
  } else {
    assert.deepEqual(Object.keys(res.json).sort(), ["data", "request_id"], ctx);
  }
  // A mutated path id can turn the request into another route's: 405 (with Allow) is fine.
  if (res.status === 405) {
    assert.ok(res.headers.allow, `405 without Allow: ${ctx}`);
    return;
  }
  if (operationId) {
    try {
      assertContract(operationId, res);
    } catch (e) {
      throw new Error(`${(e as Error).message}\n${ctx}`, { cause: e });
    }
  }
}

const describeBody = (b: string | Buffer): string =>
  typeof b === "string"
    ? b.length > 300
      ? `${JSON.stringify(b.slice(0, 300))}… (${b.length} chars)`
      : JSON.stringify(b)
    : `<${b.length} bytes ${b.subarray(0, 40).toString("hex")}>`;

type WsOutcome = { kind: "frame"; frame: Frame } | { kind: "close"; code: number } | { kind: "timeout" };

/** The first frame that is not a delivery, or the close, or nothing within `ms`. */
function nextOutcome(s: TestSocket, ms: number): Promise<WsOutcome> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve({ kind: "timeout" }), ms);
    s.next((f) => f.type !== "event.deliver", ms + 500).then(
      (frame) => {
        clearTimeout(timer);
        resolve({ kind: "frame", frame });
      },
      () => undefined,
    );
    void s.closed.then((c) => {
      clearTimeout(timer);
      resolve({ kind: "close", code: c.code });
    });
  });
}

// ---------------------------------------------------------------------------------------

describe("fuzz: HTTP and WebSocket input never crashes the node", function () {
  this.timeout(180_000 * Math.max(1, SCALE));
  let db: TestDatabase;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  let Q: string;
  let secret: string;
  let sub: string;
  let sub2: string;
  let taskDone: string;
  let taskReview: string;
  let taskQueued: string;
  let attemptDone: string;
  let attemptRunning: string;
  let delivery: { id: string; epoch: string; secret: string };
  let listCursor: string;
  let httpCases = 0;
  let wsCases = 0;
  let started = 0;
  const secrets: string[] = [];

  before(async () => {
    started = Date.now();
    db = await freshDatabase("fuzz");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
    Q = cred.queues[0]!.id;
    secret = cred.token.slice(`orbit_${cred.credential_id}_`.length);
    assert.equal(secret.length, 43);
    secrets.push(secret);
    node = await startNode(db.url, { ORBIT_HELLO_TIMEOUT_MS: "2000", ORBIT_IDLE_TIMEOUT_MS: "5000" });
    const c = client(node.url, cred.token);
    const created = async (path: string, body: unknown, status = 201) => {
      const res = await c.post(path, body);
      assert.equal(res.status, status, `${path}: ${res.text}`);
      return res.json.data;
    };
    sub = (await created("/v1/subscriptions", { name: "fuzz-a", queue_id: Q })).subscription.id;
    sub2 = (await created("/v1/subscriptions", { name: "fuzz-b", queue_id: Q })).subscription.id;
    const claim = async () => {
      const d = await created("/v1/worker/claim", { queue_id: Q, wait_ms: 0 }, 200);
      return { task: d.task.id as string, attempt: d.attempt_id as string };
    };
    // A task that SUCCEEDED (a stale attempt), one in NEEDS_REVIEW, one RUNNING, one QUEUED.
    await created("/v1/tasks", { queue_id: Q, input: { n: 1 } });
    const a = await claim();
    await created(`/v1/worker/attempts/${a.attempt}:complete`, { outcome: "succeeded", result: { ok: true } }, 200);
    taskDone = a.task;
    attemptDone = a.attempt;
    await created("/v1/tasks", { queue_id: Q, input: { n: 2 } });
    const r = await claim();
    await created(`/v1/worker/attempts/${r.attempt}:complete`, { outcome: "needs_review" }, 200);
    taskReview = r.task;
    await created("/v1/tasks", { queue_id: Q, input: { n: 3 } });
    attemptRunning = (await claim()).attempt;
    taskQueued = (await created("/v1/tasks", { queue_id: Q, input: { n: 4 } })).task.id;
    // A real delivery and its proof, left LEASED (not ACKed), to mutate around.
    const s = await connect(node.url, { token: cred.token });
    try {
      assert.equal((await s.hello(sub, 2)).type, "events.welcome");
      const d = await s.nextOfType("event.deliver", 15_000);
      delivery = { id: d.body.delivery.id, epoch: d.body.delivery.lease_epoch, secret: d.body.lease_secret };
      secrets.push(delivery.secret);
    } finally {
      s.ws.terminate();
      await s.closed;
    }
    const list = await c.get(`/v1/subscriptions?queue_id=${Q}&limit=1`);
    assert.equal(list.status, 200, list.text);
    listCursor = list.json.data.next_cursor;
    assert.equal(typeof listCursor, "string");
  });

  afterEach(function () {
    if (!node) return;
    assert.equal(node.process.exitCode, null, "the node exited");
    assert.equal(node.process.signalCode, null, "the node was killed");
    for (const line of node.lines) {
      assert.ok(!line.includes("    at "), `a stack trace in the log: ${line}`);
      for (const s of secrets) assert.ok(!line.includes(s), `a secret in the log: ${line}`);
      assert.ok(!/"level":"(error|fatal)"/.test(line), `an error in the log: ${line}`);
      assert.ok(!/unhandled|uncaught/i.test(line), `an unhandled failure in the log: ${line}`);
    }
  });

  after(async () => {
    await node?.stop();
    await db?.drop();
    console.log(
      `fuzz: ${httpCases} HTTP cases, ${wsCases} WebSocket cases in ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
    console.log(`fuzz: HTTP statuses ${summary(httpStatuses)}; WebSocket outcomes ${summary(wsOutcomes)}`);
    if (process.env.ORBIT_FUZZ_LOG)
      for (const l of node?.lines ?? []) if (!l.includes('"msg":"request"')) console.log(l);
  });

  it("a burst of pipelined frames on one bound connection: answers, then one close frame with 1008", async () => {
    const s = await connect(node.url, { token: cred.token });
    s.ws.on("error", () => undefined);
    try {
      await s.hello(sub, 1);
      // Faster than the read queue (4) and the write queue (8) take them (one TCP write):
      // valid pings, body errors, an out-of-range epoch and a non-canonical lease secret,
      // then an invalid envelope.
      const socket = (s.ws as unknown as { _socket: Socket })._socket;
      socket.cork();
      for (let i = 0; i < 20; i++) {
        s.send({
          protocol_version: "1",
          type: "events.ping",
          message_id: mid(),
          session_id: s.sessionId,
          body: i % 2 ? {} : { x: 1 },
        });
        s.send({
          protocol_version: "1",
          type: "event.ack",
          message_id: mid(),
          session_id: s.sessionId,
          body: {
            delivery_id: delivery.id,
            epoch: "18446744073709551616",
            lease_secret: `${delivery.secret.slice(0, 42)}B`,
          },
        });
      }
      s.send('{"protocol_version":"1","protocol_version":"1"}');
      socket.uncork();
      wsCases += 41;
      // The server's close frame arrives at once (the TCP close is the next test's concern).
      const until = Date.now() + 5000;
      while (s.ws.readyState === s.ws.OPEN && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
      assert.notEqual(s.ws.readyState, s.ws.OPEN, "no close frame within 5 s");
      const code = (s.ws as unknown as { _closeCode?: number })._closeCode;
      assert.equal(code, 1008, "the close code of the server's close frame");
      for (const f of s.frames) {
        assert.ok(["events.welcome", "ack", "error", "event.deliver"].includes(f.type), JSON.stringify(f));
        if (f.type === "error")
          assert.ok(["INVALID_ARGUMENT", "DELIVERY_LEASE_LOST"].includes(f.error!.code), JSON.stringify(f));
      }
    } finally {
      s.ws.terminate();
      await s.closed;
    }
  });

  // -------------------------------------------------------------------------------------
  // HTTP

  const ID = "0123456789abcdef0123456789abcdef";
  /** Ids for a path: mostly the real one, sometimes unknown or malformed. */
  const pathId = (real: string): fc.Arbitrary<string> =>
    fc.oneof(
      { weight: 8, arbitrary: fc.constant(real) },
      {
        weight: 1,
        arbitrary: fc.constantFrom(
          ID,
          real.toUpperCase(),
          real.slice(1),
          `${real}0`,
          "%30" + real.slice(1),
          "%00",
          "..",
          "%2F",
          "",
        ),
      },
    );

  interface Endpoint {
    readonly op: string;
    readonly path: fc.Arbitrary<string>;
    readonly valid: () => Record<string, unknown>;
    readonly management: boolean;
    readonly specials: Specials;
    /** The objects a mutation may hit (default: the body itself). */
    readonly targets?: readonly (readonly string[])[];
  }

  const UINT64_TEXT = UINT64_STRINGS.map((s) => JSON.stringify(s)).concat([
    "1",
    "1e400",
    "null",
    "18446744073709551616",
  ]);
  const REASON_TEXT = [
    '""',
    '"x"',
    JSON.stringify("r".repeat(1024)),
    JSON.stringify("r".repeat(1025)),
    JSON.stringify("😀".repeat(1024)),
    JSON.stringify("😀".repeat(1025)),
    '"\\ud800"',
    "null",
    "1",
  ];
  const ID_TEXT = () => [
    JSON.stringify(Q),
    JSON.stringify(Q.toUpperCase()),
    JSON.stringify(ID),
    JSON.stringify(Q.slice(1)),
    '""',
    "null",
    "123",
    JSON.stringify(`${Q} `),
  ];
  const COMMON: Record<string, readonly string[]> = {
    expected_revision: UINT64_TEXT,
    from_sequence: UINT64_TEXT,
    reason: REASON_TEXT,
    max_pending: ["0", "1", "1000", "1001", "-1", "1.5", "1e3", "1000.0", '"10"', "1e400"],
    max_attempts: ["0", "1", "100", "101", "-1", "1.5", "1e2", '"5"', "123456789012345678901234567890"],
    additional_attempts: ["0", "1", "100", "101", "1000000", "-1", "2.0", "1e400"],
    wait_ms: [
      "0",
      "-1",
      "20001",
      "1e400",
      "1.5",
      '"5"',
      "null",
      "-0",
      "1e1",
      "20001.0",
      "123456789012345678901234567890",
    ],
    types: [
      "[]",
      '["task.succeeded","task.succeeded"]',
      '["task.requeued"]',
      '["TASK.SUCCEEDED"]',
      '["task.failed","task.cancelled","task.needs_review","task.succeeded","task.failed"]',
      '"task.failed"',
      "null",
      "[1]",
    ],
    enabled: ["true", "false", '"true"', "0", "null"],
    outcome: ['"succeeded"', '"failed"', '"needs_review"', '"SUCCEEDED"', '"cancelled"', '""', "null"],
    name: [
      '""',
      '"-a"',
      '".a"',
      '"a b"',
      JSON.stringify("a".repeat(128)),
      JSON.stringify("a".repeat(129)),
      '"é"',
      '"fuzz-a"',
    ],
    error: ['""', JSON.stringify("e".repeat(1024)), JSON.stringify("e".repeat(1025)), "null", "1"],
    input: [
      JSON.stringify({ big: "x".repeat(256 * 1024) }),
      "1e400",
      "12345678901234567890",
      "null",
      '"\\ud800"',
      deep(256),
      deep(257),
    ],
    result: ["1e400", "12345678901234567890", "null", '{"a":1,"a":2}', deep(300)],
  };

  const endpoints = (): Endpoint[] => {
    const s = (extra: Record<string, readonly string[]> = {}, forced: string[] = []): Specials => ({
      values: { ...COMMON, queue_id: ID_TEXT(), ...extra },
      forced: new Set(forced),
    });
    return [
      {
        op: "createSubscription",
        path: fc.constant("/v1/subscriptions"),
        management: true,
        specials: s(),
        valid: () => ({
          name: "fuzz-new",
          queue_id: Q,
          types: ["task.succeeded", "task.failed"],
          from_sequence: "0",
          max_pending: 10,
          max_attempts: 3,
        }),
      },
      {
        op: "configureSubscription",
        path: pathId(sub2).map((id) => `/v1/subscriptions/${id}:configure`),
        management: true,
        specials: s(),
        valid: () => ({ expected_revision: "1", enabled: false, reason: "fuzz" }),
      },
      {
        op: "retryEventDelivery",
        path: fc
          .tuple(pathId(sub), pathId(delivery.id))
          .map(([a, b]) => `/v1/subscriptions/${a}/deliveries/${b}:retry`),
        management: true,
        specials: s(),
        valid: () => ({ expected_revision: "1", reason: "fuzz", additional_attempts: 2 }),
      },
      {
        op: "submitTask",
        path: fc.constant("/v1/tasks"),
        management: true,
        specials: s(),
        valid: () => ({ queue_id: Q, input: { order: "12345678901234567890" }, max_attempts: 2 }),
      },
      {
        op: "cancelTask",
        path: pathId(taskQueued).map((id) => `/v1/tasks/${id}:cancel`),
        management: true,
        specials: s(),
        valid: () => ({ expected_revision: "1", reason: "fuzz" }),
      },
      {
        op: "resolveTask",
        path: pathId(taskReview).map((id) => `/v1/tasks/${id}:resolve`),
        management: true,
        specials: s(),
        valid: () => ({ expected_revision: "3", outcome: "succeeded", result: { ok: 1 }, reason: "fuzz" }),
      },
      // wait_ms only ever takes the listed values: a random valid wait would stall the run.
      {
        op: "claimTask",
        path: fc.constant("/v1/worker/claim"),
        management: false,
        specials: s({}, ["wait_ms"]),
        valid: () => ({ queue_id: Q, wait_ms: 0 }),
      },
      {
        op: "completeAttempt",
        path: fc.oneof(pathId(attemptRunning), pathId(attemptDone)).map((id) => `/v1/worker/attempts/${id}:complete`),
        management: false,
        specials: s(),
        valid: () => ({ outcome: "failed", result: { code: 7 }, error: "fuzz" }),
      },
      {
        op: "requeueAttempt",
        path: fc.oneof(pathId(attemptRunning), pathId(attemptDone)).map((id) => `/v1/worker/attempts/${id}:requeue`),
        management: false,
        specials: s(),
        valid: () => ({ reason: "fuzz" }),
      },
      {
        op: "claimTasks",
        path: fc.constant("/v1/worker/claims"),
        management: false,
        specials: s({ max_tasks: ["0", "1", "32", "33", "-1", "1.5", '"2"', "null", "2.0", "1e400"] }, ["wait_ms"]),
        valid: () => ({ queue_id: Q, max_tasks: 2, wait_ms: 0 }),
      },
      {
        op: "completeAttempts",
        path: fc.constant("/v1/worker/completions"),
        management: false,
        specials: s({
          attempt_id: [
            JSON.stringify(attemptRunning),
            JSON.stringify(attemptDone),
            JSON.stringify(attemptDone.toUpperCase()),
            JSON.stringify(ID),
            JSON.stringify(attemptDone.slice(1)),
            '""',
            "null",
            "123",
          ],
          items: [
            "[]",
            "null",
            '"x"',
            "[1]",
            "[{}]",
            JSON.stringify(Array.from({ length: 33 }, () => ({ attempt_id: ID, outcome: "failed" }))),
            JSON.stringify([
              { attempt_id: attemptDone, outcome: "failed" },
              { attempt_id: attemptDone, outcome: "failed" },
            ]),
          ],
        }),
        targets: [[], ["items", "0"], ["items", "1"]],
        valid: () => ({
          items: [
            { attempt_id: attemptRunning, outcome: "failed", result: { code: 7 }, error: "fuzz" },
            { attempt_id: attemptDone, outcome: "succeeded", result: { ok: true } },
          ],
        }),
      },
    ];
  };

  const CONTENT_TYPES = [
    "application/json; charset=utf-8",
    "APPLICATION/JSON",
    'application/json;charset="UTF-8"',
    "application/json; charset=latin1",
    "application/json; charset=utf-16",
    "text/plain",
    "text/json",
    "",
    "application/jsonx",
    "application/json, text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/json; foo=bar",
    "application/*",
    "*/*",
  ];
  const printable = (min: number, max: number, maxLength: number, minLength = 0): fc.Arbitrary<string> =>
    fc.string({
      unit: fc
        .integer({ min, max })
        .filter((c) => c !== 0x7f)
        .map((c) => String.fromCharCode(c)),
      minLength,
      maxLength,
    });
  /** Node's client refuses some header values outright; those never reach the server. */
  const sendable = (v: string): boolean => {
    try {
      http.validateHeaderValue("x", v);
      return true;
    } catch {
      return false;
    }
  };
  const contentType: fc.Arbitrary<string | undefined> = fc.oneof(
    { weight: 12, arbitrary: fc.constant(undefined) },
    { weight: 3, arbitrary: fc.constantFrom(...CONTENT_TYPES) },
    { weight: 1, arbitrary: printable(0x20, 0x7e, 40) },
  );

  it("random POST bodies and content types on every write endpoint", async () => {
    const eps = endpoints();
    const bodyFor = (ep: Endpoint): fc.Arbitrary<string | Buffer> => {
      const validText = () => JSON.stringify(ep.valid());
      return fc.oneof(
        {
          weight: 10,
          arbitrary: fc
            .tuple(mutationArb, fc.constantFrom(...(ep.targets ?? [[]])))
            .map(([m, at]) => renderMutated(ep.valid(), at, m, ep.specials)),
        },
        { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v) ?? "null") },
        { weight: 1, arbitrary: fc.nat().map((n) => validText().slice(0, n % validText().length)) },
        { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 60 }) },
        { weight: 1, arbitrary: fc.uint8Array({ maxLength: 200 }).map((a) => Buffer.from(a)) },
        { weight: 1, arbitrary: fc.constantFrom(...DUPLICATE_TEXT, ...NESTING, ...RAW_GARBAGE, ...HUGE_NUMBERS) },
        {
          weight: 1,
          arbitrary: fc.constantFrom(
            `\ufeff${validText()}`,
            `${validText()} x`,
            `${validText()}${validText()}`,
            `[${validText()}]`,
            // Invalid UTF-8 inside a string, an overlong encoding, a lone surrogate as bytes.
            Buffer.concat([
              Buffer.from(validText().slice(0, -1)),
              Buffer.from(',"x":"'),
              Buffer.from([0xc3, 0x28]),
              Buffer.from('"}'),
            ]),
            Buffer.concat([Buffer.from('{"reason":"'), Buffer.from([0xc0, 0xaf]), Buffer.from('"}')]),
            Buffer.concat([Buffer.from('{"reason":"'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}')]),
            Buffer.from(validText(), "utf16le"),
          ),
        },
        // Oversize: just above the limit (413), exactly at it, and a 400k-digit number inside.
        {
          weight: 1,
          arbitrary: fc.constantFrom(
            validText().replace("{", "{" + " ".repeat(LIMIT + 1 - validText().length)),
            validText().replace("{", "{" + " ".repeat(LIMIT - Buffer.byteLength(validText()))),
            validText().replace("{", `{"n":${"7".repeat(400_000)},`),
            `"${"x".repeat(LIMIT)}"`,
          ),
        },
      );
    };
    const caseArb = fc.integer({ min: 0, max: eps.length - 1 }).chain((i) =>
      fc.record({
        i: fc.constant(i),
        path: eps[i]!.path,
        body: bodyFor(eps[i]!),
        contentType,
        sendKey: fc.boolean(),
      }),
    );
    await fc.assert(
      fc.asyncProperty(caseArb, async ({ i, path, body, contentType: ct, sendKey }) => {
        const ep = eps[i]!;
        const headers: [string, string][] = [];
        if (ep.management || sendKey) headers.push(["Idempotency-Key", rid()]);
        if (ct !== undefined) headers.push(["Content-Type", ct]);
        httpCases++;
        const res = await request(node.url, { method: "POST", path, token: cred.token, headers, body });
        checkHttp(res, ep.op, `POST ${path} (${ct ?? "application/json"}) ${describeBody(body)}`);
      }),
      runs(2000),
    );
  });

  it("random Authorization, Idempotency-Key, X-Request-ID and other headers", async () => {
    interface Target {
      op: string;
      method: string;
      path: string;
      body?: string;
    }
    const targets: Target[] = [
      { op: "getCurrentCredential", method: "GET", path: "/v1/credential" },
      { op: "getHealth", method: "GET", path: "/v1/health" },
      { op: "listSubscriptions", method: "GET", path: `/v1/subscriptions?queue_id=${Q}` },
      { op: "getSubscription", method: "GET", path: `/v1/subscriptions/${sub}` },
      { op: "listEventDeliveries", method: "GET", path: `/v1/subscriptions/${sub}/deliveries` },
      { op: "getEventDelivery", method: "GET", path: `/v1/subscriptions/${sub}/deliveries/${delivery.id}` },
      { op: "getTask", method: "GET", path: `/v1/tasks/${taskDone}` },
      { op: "submitTask", method: "POST", path: "/v1/tasks", body: JSON.stringify({ queue_id: Q, input: [1, 2, 3] }) },
      {
        op: "createSubscription",
        method: "POST",
        path: "/v1/subscriptions",
        body: JSON.stringify({ name: "fuzz-hdr", queue_id: Q }),
      },
      {
        op: "configureSubscription",
        method: "POST",
        path: `/v1/subscriptions/${sub2}:configure`,
        body: JSON.stringify({ expected_revision: "1", enabled: true, reason: "hdr" }),
      },
      { op: "claimTask", method: "POST", path: "/v1/worker/claim", body: JSON.stringify({ queue_id: Q }) },
      {
        op: "requeueAttempt",
        method: "POST",
        path: `/v1/worker/attempts/${attemptDone}:requeue`,
        body: JSON.stringify({ reason: "hdr" }),
      },
    ];
    const base64url = fc.string({
      unit: fc.constantFrom(..."ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
      minLength: 43,
      maxLength: 43,
    });
    const tokenish: fc.Arbitrary<string> = fc.oneof(
      { weight: 4, arbitrary: fc.constant(cred.token) },
      {
        weight: 2,
        arbitrary: fc.tuple(fc.nat(), printable(0x21, 0x7e, 1, 1)).map(([n, c]) => {
          const i = n % cred.token.length;
          return cred.token.slice(0, i) + c + cred.token.slice(i + 1);
        }),
      },
      { weight: 1, arbitrary: fc.nat().map((n) => cred.token.slice(0, n % cred.token.length)) },
      { weight: 1, arbitrary: printable(0x21, 0x7e, 8).map((x) => cred.token + x) },
      { weight: 1, arbitrary: base64url.map((x) => `orbit_${cred.credential_id}_${x}`) },
      {
        weight: 1,
        arbitrary: fc.constantFrom(
          `orbit_${ID}_${secret}`,
          `orbit_${cred.credential_id.toUpperCase()}_${secret}`,
          `orbit__${secret}`,
          `orbit_${cred.credential_id}_${secret}=`,
          `ORBIT_${cred.credential_id}_${secret}`,
          `orbit_${cred.credential_id}${secret}`,
          "orbit_",
          "orbit",
          "",
        ),
      },
      { weight: 2, arbitrary: printable(0x20, 0x7e, 120) },
      { weight: 1, arbitrary: printable(0x80, 0xff, 60) },
    );
    const scheme = fc.constantFrom(
      "Bearer ",
      "Bearer ",
      "Bearer ",
      "bearer ",
      "BEARER ",
      "Bearer  ",
      "Bearer\t",
      "Basic ",
      "",
      "Bearer",
      "Token ",
    );
    const authorization = fc.tuple(scheme, tokenish).map(([a, b]) => a + b);
    const headerValue = fc.oneof(
      printable(0x20, 0x7e, 200),
      printable(0x20, 0xff, 40),
      fc.constantFrom("", " ", "\t", "x".repeat(4000)),
    );
    const idempotencyKey = fc.oneof(
      { weight: 3, arbitrary: fc.constant(null).map(() => rid()) },
      { weight: 3, arbitrary: printable(0x20, 0x7e, 140) },
      {
        weight: 1,
        arbitrary: fc.constantFrom(
          "k".repeat(128),
          "k".repeat(129),
          " lead",
          "trail ",
          "a\tb",
          "ü",
          "\u00ff".repeat(10),
        ),
      },
    );
    const requestId = fc.oneof(
      fc.constant(null).map(() => rid()),
      fc.constant(null).map(() => rid().toUpperCase()),
      printable(0x20, 0x7e, 64),
      fc.constantFrom(`${"a".repeat(32)} `, "a".repeat(31), "a".repeat(33), "g".repeat(32), ""),
    );
    const extraName = fc.oneof(
      fc.stringMatching(/^X-[A-Za-z0-9-]{1,16}$/),
      fc.constantFrom(
        "Accept",
        "Accept-Encoding",
        "Accept-Charset",
        "Origin",
        "Cookie",
        "Content-Encoding",
        "If-None-Match",
        "Range",
        "X-Forwarded-For",
        "Forwarded",
        "Referer",
        "User-Agent",
        "Upgrade-Insecure-Requests",
        "TE",
        "Via",
      ),
    );
    const caseArb = fc.record({
      t: fc.integer({ min: 0, max: targets.length - 1 }),
      auth: fc.oneof(
        { weight: 1, arbitrary: fc.constant<string[]>([]) },
        { weight: 6, arbitrary: fc.array(authorization, { minLength: 1, maxLength: 1 }) },
        { weight: 1, arbitrary: fc.array(authorization, { minLength: 2, maxLength: 3 }) },
      ),
      keys: fc.array(idempotencyKey, { maxLength: 2 }),
      ids: fc.array(requestId, { maxLength: 2 }),
      extra: fc.array(fc.tuple(extraName, headerValue), { maxLength: 3 }),
      ct: contentType,
      nameCase: fc.nat(),
      shuffle: fc.boolean(),
    });
    await fc.assert(
      fc.asyncProperty(caseArb, async (c) => {
        const t = targets[c.t]!;
        const cased = (name: string) => [name, name.toLowerCase(), name.toUpperCase()][c.nameCase % 3]!;
        let headers: [string, string][] = [
          ...c.auth.map((a): [string, string] => [cased("Authorization"), a]),
          ...c.keys.map((k): [string, string] => [cased("Idempotency-Key"), k]),
          ...c.ids.map((k): [string, string] => [cased("X-Request-ID"), k]),
          ...c.extra,
        ];
        if (c.ct !== undefined) headers.push(["Content-Type", c.ct]);
        if (c.shuffle) headers = headers.reverse();
        headers = headers.filter(([, v]) => sendable(v));
        httpCases++;
        const res = await request(node.url, {
          method: t.method,
          path: t.path,
          headers,
          ...(t.body === undefined ? {} : { body: t.body }),
        });
        checkHttp(res, t.op, `${t.method} ${t.path} headers=${JSON.stringify(headers)}`);
        const offered = c.ids.length === 1 ? c.ids[0]! : undefined;
        if (offered !== undefined && /^[0-9a-f]{32}$/.test(offered.trim()))
          assert.equal(res.headers["x-request-id"], offered.trim());
      }),
      runs(1200),
    );
  });

  it("random query strings on list and non-list endpoints", async () => {
    interface Target {
      op: string | undefined;
      method: string;
      path: string;
      body?: string;
    }
    const targets: Target[] = [
      { op: "listSubscriptions", method: "GET", path: "/v1/subscriptions" },
      { op: "listSubscriptions", method: "GET", path: "/v1/subscriptions" },
      { op: "listEventDeliveries", method: "GET", path: `/v1/subscriptions/${sub}/deliveries` },
      { op: "listEventDeliveries", method: "GET", path: `/v1/subscriptions/${sub}/deliveries` },
      { op: "listEventDeliveries", method: "GET", path: `/v1/subscriptions/${ID}/deliveries` },
      { op: "getSubscription", method: "GET", path: `/v1/subscriptions/${sub}` },
      { op: "getEventDelivery", method: "GET", path: `/v1/subscriptions/${sub}/deliveries/${delivery.id}` },
      { op: "getTask", method: "GET", path: `/v1/tasks/${taskDone}` },
      { op: "getCurrentCredential", method: "GET", path: "/v1/credential" },
      { op: "getHealth", method: "GET", path: "/v1/health" },
      { op: undefined, method: "GET", path: "/v1/contract/openapi.yaml" },
      { op: "submitTask", method: "POST", path: "/v1/tasks", body: JSON.stringify({ queue_id: Q, input: "q" }) },
      {
        op: "requeueAttempt",
        method: "POST",
        path: `/v1/worker/attempts/${attemptDone}:requeue`,
        body: JSON.stringify({ reason: "q" }),
      },
    ];
    const mutatedCursor = fc
      .tuple(fc.nat(), fc.constantFrom("A", "_", "-", "=", "%3D", "%", "+", "/", "", "AAAA"))
      .map(([n, c]) => {
        const i = n % (listCursor.length + 1);
        return listCursor.slice(0, i) + c + listCursor.slice(i + 1);
      });
    const encodedUnicode = fc.string({ unit: "grapheme", maxLength: 12 }).map((s) => encodeURIComponent(s));
    const badPercent = fc.constantFrom(
      "%",
      "%Z",
      "%ZZ",
      "%0",
      "%00",
      "%C3%28",
      "%ED%A0%80",
      "%F0%9F%98",
      "%FF%FE",
      "%25%32%35",
      "%c0%af",
      "%E2%80%A8",
      "%2B",
      "%20",
      "+",
      "%26",
      "%3D",
    );
    const rawChars = printable(0x21, 0x7e, 12).map((s) => s.replace(/[?&=]/g, "")); // '#' stays: a raw fragment
    const name = fc.oneof(
      { weight: 6, arbitrary: fc.constantFrom("queue_id", "queue_id", "limit", "cursor", "state") },
      {
        weight: 2,
        arbitrary: fc.constantFrom(
          "Queue_id",
          "LIMIT",
          "Cursor",
          "STATE",
          "queue_id%00",
          "queue%5Fid",
          "queue_id[]",
          "queue_id ",
          "%71ueue_id",
          "",
          "limit.",
          "__proto__",
          "constructor",
        ),
      },
      { weight: 1, arbitrary: encodedUnicode },
      { weight: 1, arbitrary: rawChars },
    );
    const value = fc.oneof(
      { weight: 4, arbitrary: fc.constant(Q) },
      {
        weight: 3,
        arbitrary: fc.constantFrom(
          "1",
          "20",
          "100",
          "0",
          "01",
          "101",
          "-1",
          "1.0",
          "%2B5",
          "1e2",
          "",
          " 1",
          "18446744073709551616",
          "99999999999999999999",
          "PENDING",
          "LEASED",
          "EXPIRED",
          "ACKED",
          "leased",
          "pending",
        ),
      },
      { weight: 2, arbitrary: fc.constant(listCursor) },
      { weight: 2, arbitrary: mutatedCursor },
      {
        weight: 1,
        arbitrary: fc.constantFrom(Q.toUpperCase(), ID, Q.slice(1), `${Q}%00`, "A".repeat(2000), "%41".repeat(500)),
      },
      { weight: 1, arbitrary: encodedUnicode },
      { weight: 1, arbitrary: badPercent },
      { weight: 1, arbitrary: rawChars },
    );
    const param = fc.oneof(
      { weight: 8, arbitrary: fc.tuple(name, value).map(([n, v]) => `${n}=${v}`) },
      { weight: 1, arbitrary: name },
      { weight: 1, arbitrary: value.map((v) => `=${v}`) },
      { weight: 1, arbitrary: fc.tuple(name, value, value).map(([n, a, b]) => `${n}=${a}=${b}`) },
    );
    const caseArb = fc.record({
      t: fc.integer({ min: 0, max: targets.length - 1 }),
      params: fc.array(param, { maxLength: 5 }),
      sep: fc.constantFrom("&", "&", "&", ";", "&&", "&amp;"),
      question: fc.constantFrom("?", "?", "?", "??", "?&"),
      trailing: fc.constantFrom("", "", "", "&", "#frag", "?", "=", "%"),
    });
    await fc.assert(
      fc.asyncProperty(caseArb, async (c) => {
        const t = targets[c.t]!;
        // Node's client refuses spaces and characters above U+00FF in a path: escape those.
        const path = `${t.path}${c.question}${c.params.join(c.sep)}${c.trailing}`.replace(/[^\u0021-\u00ff]/gu, (ch) =>
          encodeURIComponent(ch),
        );
        httpCases++;
        const res = await request(node.url, {
          method: t.method,
          path,
          token: cred.token,
          ...(t.body === undefined ? {} : { body: t.body, headers: [["Idempotency-Key", rid()]] }),
        });
        if (t.op === undefined && res.status === 200) {
          assertCommonHeaders({ ...res, text: "" });
          return;
        }
        checkHttp(res, t.op, `${t.method} ${path}`);
      }),
      runs(1200),
    );
  });

  // -------------------------------------------------------------------------------------
  // WebSocket

  /** Frames to send: text (SESSION placeholders filled in at send time) or binary. */
  type WsFrame = { readonly text: string } | { readonly binary: Buffer };

  const wsSpecials = (): Specials => {
    const q = (s: string) => JSON.stringify(s);
    const bytes = Buffer.from(delivery.secret, "base64url");
    return {
      values: {
        protocol_version: ['"1"', '"2"', "1", '"1.0"', '"01"', "null", '""', '" 1"'],
        type: [
          '"events.hello"',
          '"events.ping"',
          '"event.ack"',
          '"events.welcome"',
          '"ack"',
          '"error"',
          '"event.deliver"',
          '"EVENTS.PING"',
          '"events.ping "',
          '""',
          "1",
          "null",
        ].concat(['"events.hello","type":"events.ping"']),
        message_id: [q(mid()), q(mid().toUpperCase()), q(mid().slice(1)), q(`${mid()}0`), '""', "1", "null", "1e400"],
        session_id: [
          q(SESSION),
          q(SESSION),
          q(mid()),
          q(SESSION_UPPER),
          '""',
          "null",
          "123456789012345678901234567890",
        ],
        subscription_id: [q(sub), q(sub2), q(ID), q(sub.toUpperCase()), q(`${sub}0`), '""', "null", q(Q)],
        capacity: [
          "0",
          "1",
          "32",
          "33",
          "-1",
          "1.5",
          '"1"',
          "1e400",
          "1e1",
          "1.0",
          "9007199254740993",
          "null",
          "true",
          "-0",
          "4294967297",
        ],
        delivery_id: [q(delivery.id), q(ID), q(delivery.id.toUpperCase()), q(delivery.id.slice(1)), '""', "null"],
        epoch: [
          q(delivery.epoch),
          '"18446744073709551616"',
          '"18446744073709551615"',
          '"0"',
          '"-1"',
          '"01"',
          "1",
          '"1e3"',
          '""',
          "1e400",
          '"99999999999999999999999"',
          q(`${delivery.epoch} `),
        ],
        lease_secret: [
          q(delivery.secret),
          q(delivery.secret.slice(0, 42) + "B"), // non-zero trailing bits
          q(`${delivery.secret}=`), // padding
          q(bytes.toString("base64")), // standard alphabet with padding
          q(delivery.secret.slice(0, 41) + "+A"),
          q(delivery.secret.slice(0, 41) + "/A"),
          q(delivery.secret.slice(0, 42)),
          q(`${delivery.secret}A`),
          q("A".repeat(43)),
          q("=".repeat(43)),
          q(`${delivery.secret.slice(0, 42)}\u00c0`),
          '""',
          "null",
          "42",
        ],
      },
    };
  };

  it("random and near-valid WebSocket frames, with and without a session", async () => {
    const specials = wsSpecials();
    const valid = {
      hello: () => ({
        protocol_version: "1",
        type: "events.hello",
        message_id: mid(),
        body: { subscription_id: sub, capacity: 1 },
      }),
      ping: () => ({ protocol_version: "1", type: "events.ping", message_id: mid(), session_id: SESSION, body: {} }),
      ack: () => ({
        protocol_version: "1",
        type: "event.ack",
        message_id: mid(),
        session_id: SESSION,
        body: { delivery_id: delivery.id, epoch: delivery.epoch, lease_secret: delivery.secret },
      }),
    };
    const kinds = ["hello", "ping", "ack"] as const;
    // Bound connections mostly get pings and ACKs, unbound ones mostly hellos; mutations
    // mostly inside the body, since most envelope mutations just close the connection.
    type Kind = (typeof kinds)[number];
    const kindFor = (bind: boolean): fc.Arbitrary<Kind> =>
      fc.oneof(
        { weight: bind ? 1 : 6, arbitrary: fc.constant<Kind>("hello") },
        { weight: bind ? 3 : 1, arbitrary: fc.constant<Kind>("ping") },
        { weight: bind ? 6 : 1, arbitrary: fc.constant<Kind>("ack") },
      );
    const nearValid = (bind: boolean): fc.Arbitrary<WsFrame> =>
      fc
        .record({
          kind: kindFor(bind),
          inBody: fc.oneof({ weight: 2, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) }),
          m: mutationArb,
        })
        .map(({ kind, inBody, m }) => ({ text: renderMutated(valid[kind](), inBody ? ["body"] : [], m, specials) }));
    const frameArb = (bind: boolean): fc.Arbitrary<WsFrame> =>
      fc.oneof(
        { weight: 12, arbitrary: nearValid(bind) },
        { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 4 }).map((v) => ({ text: JSON.stringify(v) ?? "null" })) },
        { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 80 }).map((text) => ({ text })) },
        {
          weight: 1,
          arbitrary: fc.tuple(fc.constantFrom(...kinds), fc.nat()).map(([k, n]) => {
            const t = JSON.stringify(valid[k]());
            return { text: t.slice(0, n % t.length) };
          }),
        },
        {
          weight: 1,
          arbitrary: fc
            .constantFrom(...DUPLICATE_TEXT, ...NESTING, ...RAW_GARBAGE, ...HUGE_NUMBERS, "", " ", "{}", "[]", "null")
            .map((text) => ({ text })),
        },
        {
          weight: 1,
          arbitrary: fc
            .constantFrom(
              `\ufeff${JSON.stringify(valid.ping())}`,
              `${JSON.stringify(valid.ping())}${JSON.stringify(valid.ping())}`,
              `[${JSON.stringify(valid.ping())}]`,
              JSON.stringify({ ...valid.ping(), body: { a: deep(300) } }).replace(`"${deep(300)}"`, deep(300)),
              // A valid ping padded to just under the frame limit: accepted.
              JSON.stringify(valid.ping()).replace("{", "{" + " ".repeat(LIMIT - 400)),
            )
            .map((text) => ({ text })),
        },
        { weight: 1, arbitrary: fc.uint8Array({ maxLength: 100 }).map((a) => ({ binary: Buffer.from(a) })) },
        {
          weight: 1,
          arbitrary: fc.constantFrom(...kinds).map((k) => ({ binary: Buffer.from(JSON.stringify(valid[k]())) })),
        },
      );
    const caseArb = fc
      .oneof({ weight: 3, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) })
      .chain((bind) =>
        fc.record({ bind: fc.constant(bind), capacity: fc.integer({ min: 1, max: 4 }), frame: frameArb(bind) }),
      );
    await fc.assert(
      fc.asyncProperty(caseArb, async ({ bind, capacity, frame }) => {
        wsCases++;
        await wsCase(bind, capacity, frame, [1008]);
      }),
      runs(1200),
    );
  });

  /**
   * One connection, optionally bound, one frame; then the answer must be a frame that keeps
   * the connection usable (a ping afterwards is answered), or an error frame whose code
   * closes it followed by the close, or a close with one of `closeCodes`.
   */
  async function wsCase(bind: boolean, capacity: number, frame: WsFrame, closeCodes: number[]): Promise<void> {
    const s = await connect(node.url, { token: cred.token });
    s.ws.on("error", () => undefined); // a reset while sending oversize data is not a failure here
    const what = () => `bind=${bind} frame=${"text" in frame ? describeBody(frame.text) : describeBody(frame.binary)}`;
    try {
      if (bind) {
        const w = await s.hello(sub, capacity);
        assert.equal(w.type, "events.welcome", JSON.stringify(w));
      }
      const session = s.sessionId || mid();
      if ("text" in frame)
        s.send(frame.text.replaceAll(SESSION_UPPER, session.toUpperCase()).replaceAll(SESSION, session));
      else s.ws.send(frame.binary, { binary: true });
      const out = await nextOutcome(s, 4000);
      if (out.kind === "timeout") assert.fail(`no answer and no close within 4 s: ${what()}`);
      tally(
        wsOutcomes,
        out.kind === "close"
          ? `close ${out.code}`
          : out.kind === "frame"
            ? out.frame.error
              ? `error ${out.frame.error.code}`
              : out.frame.type
            : "timeout",
      );
      if (out.kind === "close") {
        assert.ok(closeCodes.includes(out.code), `closed with ${out.code}: ${what()}`);
        return;
      }
      const f = out.frame;
      if (f.type === "error") {
        const code = f.error!.code;
        assert.ok(CODES.has(code), `error code outside the catalogue: ${JSON.stringify(f)} ${what()}`);
        assert.notEqual(code, "INTERNAL", `INTERNAL: ${what()}`);
        assert.notEqual(code, "UNAVAILABLE", `UNAVAILABLE with the database up: ${what()}`);
        // An error that closes, or any error on an unbound connection (an invalid hello
        // body: INVALID_ARGUMENT, then 1008), is followed by the close.
        if (ERROR_CATALOGUE[code as ErrorCode].ws === "close" || !s.sessionId) {
          const closed = await Promise.race([s.closed, new Promise<null>((r) => setTimeout(() => r(null), 4000))]);
          assert.ok(closed, `${code} but the connection stayed open: ${what()}`);
          assert.equal(closed.code, 1008, `${code} then close ${closed.code}: ${what()}`);
          return;
        }
      } else {
        assert.ok(
          f.type === "ack" || f.type === "events.welcome",
          `unexpected ${f.type}: ${JSON.stringify(f)} ${what()}`,
        );
      }
      // The connection stays usable: a valid ping on the session is answered.
      const sessionId = f.type === "events.welcome" ? f.session_id! : s.sessionId;
      assert.ok(sessionId, `an answer that keeps an unbound connection open: ${JSON.stringify(f)} ${what()}`);
      const pingId = mid();
      s.send({ protocol_version: "1", type: "events.ping", message_id: pingId, session_id: sessionId, body: {} });
      const pong = await nextOutcome(s, 4000);
      assert.ok(
        pong.kind === "frame" && pong.frame.type === "ack" && pong.frame.reply_to === pingId,
        `the connection is not usable afterwards (${JSON.stringify(pong)}): ${what()}`,
      );
    } finally {
      s.ws.terminate();
      await s.closed;
    }
  }

  it("oversize frames close with 1009; a frame at the limit is read", async () => {
    const over = { text: "x".repeat(LIMIT + 1) };
    const overJson = {
      text: JSON.stringify({
        protocol_version: "1",
        type: "events.ping",
        message_id: mid(),
        session_id: SESSION,
        body: {},
      }).replace("{", "{" + " ".repeat(LIMIT)),
    };
    for (const bind of [false, true]) {
      for (const f of [over, overJson, { binary: Buffer.alloc(LIMIT + 1, 0x7b) }]) {
        wsCases++;
        await wsCase(bind, 1, f, [1009]);
      }
      // Exactly 512 KiB, not JSON: read, then refused as an invalid envelope (1008).
      wsCases++;
      await wsCase(bind, 1, { text: "x".repeat(LIMIT) }, [1008]);
    }
    // A valid ping of exactly 512 KiB is answered.
    const ping = (id: string) =>
      JSON.stringify({ protocol_version: "1", type: "events.ping", message_id: id, session_id: SESSION, body: {} });
    const exact = ping(mid()).replace(
      "{",
      "{" + " ".repeat(LIMIT - Buffer.byteLength(ping(mid())) + SESSION.length - 32),
    );
    wsCases++;
    await wsCase(true, 1, { text: exact }, []);
  });

  /**
   * Once a connection has READ_QUEUE (4) frames in processing its reading is paused;
   * close() must resume it (src/ws/event-session.ts), or the server never reads the client's
   * close reply and the socket lingers until ws's 30 s closing timeout (and a SIGTERM
   * waits for it).
   */
  it("completes the close handshake at once after 4 pipelined frames", async () => {
    const s = await connect(node.url, { token: cred.token });
    s.ws.on("error", () => undefined);
    try {
      await s.hello(sub, 1);
      // Four frames in one TCP segment, so that the server reads them in one go.
      const socket = (s.ws as unknown as { _socket: Socket })._socket;
      socket.cork();
      for (let i = 0; i < 3; i++)
        s.send({
          protocol_version: "1",
          type: "events.ping",
          message_id: mid(),
          session_id: s.sessionId,
          body: { x: 1 },
        });
      s.send("{");
      socket.uncork();
      wsCases += 4;
      const closed = await Promise.race([s.closed, new Promise<null>((r) => setTimeout(() => r(null), 3000))]);
      assert.ok(closed, "the TCP connection is still open 3 s after the server's close frame");
      assert.equal(closed.code, 1008);
    } finally {
      s.ws.terminate();
      await s.closed;
    }
  });
});

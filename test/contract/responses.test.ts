// Every response a real `orbit serve` gives, against openapi.yaml as an SDK author reads
// it (test/helpers/openapi.ts): for each operation its success and error paths are driven
// over HTTP (and the WebSocket upgrade), and each answer must have a status the operation
// lists, a declared media type, a body valid under a strict validator compiled from the
// document, and every header its response declares required (Retry-After on 429 and
// 503, Allow on 405, …). At the end every declared status must have been seen, except
// the few listed in NOT_DRIVEN with the reason they are not.
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import http from "node:http";
import { MAX_JSON_DEPTH } from "../../src/config/limits.js";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, runCli, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { makeCredential, readLog, waitSequenced } from "../helpers/api.js";
import { request, type RawRequest, type RawResponse } from "../helpers/http.js";
import { connect, refusal, type TestSocket } from "../helpers/ws.js";
import { OPENAPI, OPERATIONS, assertDeclaredResponse, assertOperation, seen } from "../helpers/openapi.js";

const NO_ID = "0123456789abcdef0123456789abcdef";
const BIG = JSON.stringify({ x: "a".repeat(513 * 1024) });

/** Declared statuses this file does not produce, and why. */
const NOT_DRIVEN: Record<string, string> = {
  "*:500": "an internal error (http-basics.test.ts forces one by renaming a table)",
  "*:501": "a build that does not implement an operation yet; a complete Orbit never answers it",
  "connectEvents:503": "a node shutting down while the upgrade authenticates (ws/protection.test.ts)",
  "getHealth:503": "the database down (ws/database-failure.test.ts)",
  "getReadiness:503": "the schema behind the code",
  "submitTask:429":
    "a namespace at ORBIT_MAX_QUEUED_TASKS_PER_NAMESPACE (api/queued-quota.test.ts checks it against the contract)",
};

/** A raw request whose answer is not 101: an upgrade refused, or a plain response. */
function upgradeRequest(baseUrl: string, path: string, headers: [string, string][]): Promise<RawResponse> {
  return request(baseUrl, { path, headers: [["Connection", "Upgrade"], ...headers] });
}

describe("contract: every response validates against openapi.yaml", function () {
  this.timeout(120000);
  let db: TestDatabase;
  let node: OrbitNode;
  let owner: BootstrapOutput;
  let other: BootstrapOutput;
  let noAction: string;
  let queue: string;
  const sockets: TestSocket[] = [];

  const call = (r: RawRequest, token: string | undefined = owner.token) =>
    request(node.url, { ...(token ? { token } : {}), ...r });
  const post = (path: string, body: unknown, o: { key?: string | null; token?: string; type?: string } = {}) =>
    call(
      {
        method: "POST",
        path,
        headers: [
          ...(o.key === null ? [] : [["Idempotency-Key", o.key ?? randomBytes(8).toString("hex")] as [string, string]]),
          ...(o.type ? [["Content-Type", o.type] as [string, string]] : []),
        ],
        body: typeof body === "string" ? body : JSON.stringify(body),
      },
      o.token,
    );
  /** Calls and checks: the answer must be declared for operationId, and have this status. */
  async function expect(
    operationId: string,
    status: number,
    res: Promise<RawResponse> | RawResponse,
  ): Promise<RawResponse> {
    const r = await res;
    assertOperation(operationId, r);
    assert.equal(r.status, status, `${operationId}: ${r.text}`);
    return r;
  }

  before(async () => {
    db = await freshDatabase("responses");
    owner = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
    other = await bootstrap(db.url, { namespace: "ns2", application: "app", queues: ["q2"], eventAccess: true });
    queue = owner.queues[0]!.id;
    noAction = (
      await makeCredential(db, {
        namespaceId: owner.namespace_id,
        applicationId: owner.application_id,
        actions: [],
        queueIds: [queue],
      })
    ).token;
    node = await startNode(db.url, {
      ORBIT_MAX_CONNECTIONS: "1",
      ORBIT_LEASE_DURATION_MS: "500",
      ORBIT_REQUEST_TIMEOUT_MS: "1500",
    });
  });
  after(async () => {
    for (const s of sockets) s.close();
    await node?.stop();
    await db?.drop();
  });

  it("operator and contract endpoints", async () => {
    const publicGets = {
      getHealth: "/v1/health",
      getLiveness: "/healthz",
      getReadiness: "/readyz",
      getMetrics: "/metrics",
      getOpenapiDocument: "/v1/contract/openapi.yaml",
      getEventsSchema: "/v1/contract/events.schema.json",
    };
    for (const [op, path] of Object.entries(publicGets)) {
      await expect(op, 200, call({ path }, ""));
      await expect(op, 400, call({ path: `${path}?x=1` }, ""));
    }
    // With a metrics listener of its own, the main port's /metrics is 404 (api/metrics.test.ts).
    const separate = await startNode(db.url, { ORBIT_METRICS_PORT: "0" });
    try {
      await expect("getMetrics", 404, request(separate.url, { path: "/metrics" }));
    } finally {
      await separate.stop();
    }
    await expect("getCurrentCredential", 200, call({ path: "/v1/credential" }));
    await expect("getCurrentCredential", 400, call({ path: "/v1/credential?x=1" }));
    await expect("getCurrentCredential", 401, call({ path: "/v1/credential" }, ""));
  });

  let taskId = "";
  let attemptId = "";
  it("tasks and workers", async () => {
    const submit = (body: unknown, o = {}) => post("/v1/tasks", body, o);
    const created = await expect("submitTask", 201, submit({ queue_id: queue, input: { n: 1 } }, { key: "t1" }));
    taskId = created.json.data.task.id;
    await expect("submitTask", 200, submit({ queue_id: queue, input: { n: 1 } }, { key: "t1" }));
    await expect("submitTask", 409, submit({ queue_id: queue, input: { n: 2 } }, { key: "t1" }));
    await expect("submitTask", 400, submit({ queue_id: queue, input: 1, extra: 1 }));
    await expect("submitTask", 401, submit({ queue_id: queue, input: 1 }, { token: "" }));
    await expect("submitTask", 403, submit({ queue_id: queue, input: 1 }, { token: noAction }));
    await expect("submitTask", 404, submit({ queue_id: other.queues[0]!.id, input: 1 }));
    await expect("submitTask", 413, submit(BIG));
    await expect("submitTask", 415, submit({ queue_id: queue, input: 1 }, { type: "text/plain" }));

    await expect("getTask", 200, call({ path: `/v1/tasks/${taskId}` }));
    await expect("getTask", 404, call({ path: `/v1/tasks/${NO_ID}` }));
    await expect("getTask", 400, call({ path: `/v1/tasks/${taskId}?x=1` }));
    await expect("getTask", 401, call({ path: `/v1/tasks/${taskId}` }, ""));
    await expect("getTask", 403, call({ path: `/v1/tasks/${taskId}` }, noAction));

    const claim = (body: unknown, o = {}) => post("/v1/worker/claim", body, { key: null, ...o });
    const claimed = await expect("claimTask", 200, claim({ queue_id: queue }));
    attemptId = claimed.json.data.attempt_id;
    await expect("claimTask", 204, claim({ queue_id: queue }));
    await expect("claimTask", 400, claim({ queue_id: queue, wait_ms: 20001 }));
    await expect("claimTask", 401, claim({ queue_id: queue }, { token: "" }));
    await expect("claimTask", 403, claim({ queue_id: queue }, { token: noAction }));
    await expect("claimTask", 404, claim({ queue_id: other.queues[0]!.id }));
    await expect("claimTask", 413, claim(BIG));
    await expect("claimTask", 415, claim({ queue_id: queue }, { type: "text/plain" }));

    const complete = (id: string, body: unknown, o = {}) =>
      post(`/v1/worker/attempts/${id}:complete`, body, { key: null, ...o });
    await expect("completeAttempt", 400, complete(attemptId, { outcome: "done" }));
    await expect("completeAttempt", 401, complete(attemptId, { outcome: "needs_review" }, { token: "" }));
    await expect("completeAttempt", 403, complete(attemptId, { outcome: "needs_review" }, { token: noAction }));
    await expect("completeAttempt", 404, complete(NO_ID, { outcome: "needs_review" }));
    await expect("completeAttempt", 413, complete(attemptId, BIG));
    await expect("completeAttempt", 415, complete(attemptId, { outcome: "needs_review" }, { type: "text/plain" }));
    await expect(
      "completeAttempt",
      200,
      complete(attemptId, '{"outcome":"needs_review","result":{"n":12345678901234567890}}'),
    );
    await expect(
      "completeAttempt",
      200,
      complete(attemptId, '{"outcome":"needs_review","result":{"n":12345678901234567890}}'),
    );
    await expect("completeAttempt", 409, complete(attemptId, { outcome: "failed" }));

    const resolveBody = { expected_revision: "3", outcome: "succeeded", reason: "checked" };
    const resolve = (body: unknown, o = {}) => post(`/v1/tasks/${taskId}:resolve`, body, o);
    await expect("resolveTask", 409, resolve({ ...resolveBody, expected_revision: "9" }));
    await expect("resolveTask", 400, resolve({ ...resolveBody, outcome: "maybe" }));
    await expect("resolveTask", 401, resolve(resolveBody, { token: "" }));
    await expect("resolveTask", 403, resolve(resolveBody, { token: noAction }));
    await expect("resolveTask", 404, post(`/v1/tasks/${NO_ID}:resolve`, resolveBody));
    await expect("resolveTask", 413, resolve(BIG));
    await expect("resolveTask", 415, resolve(resolveBody, { type: "text/plain" }));
    await expect("resolveTask", 200, resolve(resolveBody));

    // A second task: requeued, then cancelled.
    const second = (await expect("submitTask", 201, submit({ queue_id: queue, input: null }))).json.data.task
      .id as string;
    const attempt2 = (await expect("claimTask", 200, claim({ queue_id: queue }))).json.data.attempt_id as string;
    const requeue = (id: string, body: unknown, o = {}) =>
      post(`/v1/worker/attempts/${id}:requeue`, body, { key: null, ...o });
    await expect("requeueAttempt", 400, requeue(attempt2, { reason: "" }));
    await expect("requeueAttempt", 401, requeue(attempt2, { reason: "r" }, { token: "" }));
    await expect("requeueAttempt", 403, requeue(attempt2, { reason: "r" }, { token: noAction }));
    await expect("requeueAttempt", 404, requeue(NO_ID, { reason: "r" }));
    await expect("requeueAttempt", 413, requeue(attempt2, BIG));
    await expect("requeueAttempt", 415, requeue(attempt2, { reason: "r" }, { type: "text/plain" }));
    await expect("requeueAttempt", 200, requeue(attempt2, { reason: "r" }));
    await expect("requeueAttempt", 409, requeue(attempt2, { reason: "other" }));

    const cancelBody = { expected_revision: "3", reason: "withdrawn" };
    const cancel = (body: unknown, o = {}) => post(`/v1/tasks/${second}:cancel`, body, o);
    await expect("cancelTask", 409, cancel({ ...cancelBody, expected_revision: "1" }));
    await expect("cancelTask", 400, cancel({ expected_revision: "3" }));
    await expect("cancelTask", 401, cancel(cancelBody, { token: "" }));
    await expect("cancelTask", 403, cancel(cancelBody, { token: noAction }));
    await expect("cancelTask", 404, post(`/v1/tasks/${NO_ID}:cancel`, cancelBody));
    await expect("cancelTask", 413, cancel(BIG));
    await expect("cancelTask", 415, cancel(cancelBody, { type: "text/plain" }));
    await expect("cancelTask", 200, cancel(cancelBody));
  });

  let subId = "";
  it("subscriptions", async () => {
    await waitSequenced(db, owner.namespace_id);
    const create = (body: unknown, o = {}) => post("/v1/subscriptions", body, o);
    const body = { name: "all", queue_id: queue, from_sequence: "0", max_attempts: 1 };
    const created = await expect("createSubscription", 201, create(body, { key: "s1" }));
    subId = created.json.data.subscription.id;
    await expect("createSubscription", 200, create(body, { key: "s1" }));
    await expect("createSubscription", 409, create({ ...body, name: "other" }, { key: "s1" }));
    await expect("createSubscription", 409, create(body));
    await expect("createSubscription", 400, create({ ...body, name: "-bad" }));
    await expect("createSubscription", 400, create({ ...body, name: "later", from_sequence: "99" }));
    await expect("createSubscription", 401, create(body, { token: "" }));
    await expect("createSubscription", 403, create(body, { token: noAction }));
    await expect("createSubscription", 404, create({ ...body, queue_id: other.queues[0]!.id }));
    await expect("createSubscription", 413, create(BIG));
    await expect("createSubscription", 415, create(body, { type: "text/plain" }));
    await expect("createSubscription", 201, create({ name: "second", queue_id: queue }));

    const list = (q: string, token?: string) => call({ path: `/v1/subscriptions${q}` }, token);
    const page = await expect("listSubscriptions", 200, list(`?queue_id=${queue}&limit=1`));
    assert.ok(page.json.data.next_cursor, "a next page");
    await expect("listSubscriptions", 200, list(`?queue_id=${queue}&cursor=${page.json.data.next_cursor}`));
    await expect("listSubscriptions", 400, list(`?queue_id=${queue}&limit=0`));
    await expect("listSubscriptions", 401, list(`?queue_id=${queue}`, ""));
    await expect("listSubscriptions", 403, list(`?queue_id=${queue}`, noAction));
    await expect("listSubscriptions", 404, list(`?queue_id=${other.queues[0]!.id}`));

    await expect("getSubscription", 200, call({ path: `/v1/subscriptions/${subId}` }));
    await expect("getSubscription", 400, call({ path: `/v1/subscriptions/${subId}?x=1` }));
    await expect("getSubscription", 401, call({ path: `/v1/subscriptions/${subId}` }, ""));
    await expect("getSubscription", 403, call({ path: `/v1/subscriptions/${subId}` }, noAction));
    await expect("getSubscription", 404, call({ path: `/v1/subscriptions/${subId}` }, other.token));

    const configure = (b: unknown, o = {}) => post(`/v1/subscriptions/${subId}:configure`, b, o);
    const cBody = { expected_revision: "1", enabled: true, reason: "same" };
    await expect("configureSubscription", 409, configure({ ...cBody, expected_revision: "5" }));
    await expect("configureSubscription", 400, configure({ ...cBody, enabled: "yes" }));
    await expect("configureSubscription", 401, configure(cBody, { token: "" }));
    await expect("configureSubscription", 403, configure(cBody, { token: noAction }));
    await expect("configureSubscription", 404, configure(cBody, { token: other.token }));
    await expect("configureSubscription", 413, configure(BIG));
    await expect("configureSubscription", 415, configure(cBody, { type: "text/plain" }));
    await expect("configureSubscription", 200, configure(cBody));
  });

  it("the event connection and deliveries", async () => {
    const path = "/v1/events/connect";
    const ws: [string, string][] = [
      ["Upgrade", "websocket"],
      ["Sec-WebSocket-Version", "13"],
      ["Sec-WebSocket-Key", randomBytes(16).toString("base64")],
    ];
    await expect(
      "connectEvents",
      401,
      upgradeRequest(node.url, path, [...ws, ["Sec-WebSocket-Protocol", "orbit.events.v1"]]),
    );
    await expect(
      "connectEvents",
      403,
      call(
        { path, headers: [["Connection", "Upgrade"], ...ws, ["Sec-WebSocket-Protocol", "orbit.events.v1"]] },
        noAction,
      ),
    );
    await expect(
      "connectEvents",
      400,
      call({
        path: `${path}?x=1`,
        headers: [["Connection", "Upgrade"], ...ws, ["Sec-WebSocket-Protocol", "orbit.events.v1"]],
      }),
    );
    await expect("connectEvents", 426, call({ path, headers: [["Connection", "Upgrade"], ...ws] }));
    await expect("connectEvents", 426, call({ path }));
    const version = await expect(
      "connectEvents",
      426,
      call({
        path,
        headers: [
          ["Connection", "Upgrade"],
          ...ws,
          ["Sec-WebSocket-Version", "8"],
          ["Sec-WebSocket-Protocol", "orbit.events.v1"],
        ],
      }),
    );
    assert.equal(version.headers["sec-websocket-version"], "13");

    // The 101, its headers checked as a response of connectEvents.
    const upgraded = await new Promise<RawResponse>((resolve, reject) => {
      const u = new URL(node.url);
      const req = http.request({
        host: u.hostname,
        port: u.port,
        path,
        agent: false,
        headers: {
          Authorization: `Bearer ${owner.token}`,
          Connection: "Upgrade",
          ...Object.fromEntries(ws),
          "Sec-WebSocket-Protocol": "orbit.events.v1",
        },
      });
      req.on("upgrade", (res, socket) => {
        socket.destroy();
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text: "", json: undefined });
      });
      req.on("response", (res) => reject(new Error(`no upgrade: ${res.statusCode}`)));
      req.on("error", reject);
      req.end();
    });
    await expect("connectEvents", 101, upgraded);
    await new Promise((r) => setTimeout(r, 200));

    const s = await connect(node.url, { token: owner.token });
    sockets.push(s);
    // This node takes one event connection (ORBIT_MAX_CONNECTIONS=1): 429 with Retry-After.
    const busy = await refusal(connect(node.url, { token: owner.token }));
    await expect("connectEvents", 429, {
      status: busy.status,
      headers: busy.headers as http.IncomingHttpHeaders,
      text: JSON.stringify(busy.body),
      json: busy.body,
    });

    assert.equal((await s.hello(subId, 1)).type, "events.welcome");
    const deliver = await s.nextOfType("event.deliver");
    const deliveryId = deliver.body.delivery.id as string;
    const deliveries = `/v1/subscriptions/${subId}/deliveries`;
    await expect("listEventDeliveries", 200, call({ path: deliveries }));
    await expect("listEventDeliveries", 400, call({ path: `${deliveries}?state=GONE` }));
    await expect("listEventDeliveries", 401, call({ path: deliveries }, ""));
    await expect("listEventDeliveries", 403, call({ path: deliveries }, noAction));
    await expect("listEventDeliveries", 404, call({ path: deliveries }, other.token));
    await expect("getEventDelivery", 200, call({ path: `${deliveries}/${deliveryId}` }));
    await expect("getEventDelivery", 400, call({ path: `${deliveries}/${deliveryId}?x=1` }));
    await expect("getEventDelivery", 401, call({ path: `${deliveries}/${deliveryId}` }, ""));
    await expect("getEventDelivery", 403, call({ path: `${deliveries}/${deliveryId}` }, noAction));
    await expect("getEventDelivery", 404, call({ path: `${deliveries}/${NO_ID}` }));

    // max_attempts 1 and a 500 ms lease: unacknowledged, the delivery ends EXPIRED.
    const retryPath = `${deliveries}/${deliveryId}:retry`;
    let d: any;
    for (const until = Date.now() + 15000; Date.now() < until; await new Promise((r) => setTimeout(r, 200))) {
      d = (await call({ path: `${deliveries}/${deliveryId}` })).json.data.delivery;
      if (d.state === "EXPIRED") break;
    }
    assert.equal(d.state, "EXPIRED");
    const rBody = { expected_revision: d.revision, reason: "repaired", additional_attempts: 1 };
    const retry = (b: unknown, o = {}) => post(retryPath, b, o);
    await expect("retryEventDelivery", 409, retry({ ...rBody, expected_revision: "1" }));
    await expect("retryEventDelivery", 400, retry({ ...rBody, additional_attempts: 0 }));
    await expect("retryEventDelivery", 401, retry(rBody, { token: "" }));
    await expect("retryEventDelivery", 403, retry(rBody, { token: noAction }));
    await expect("retryEventDelivery", 404, post(`${deliveries}/${NO_ID}:retry`, rBody));
    await expect("retryEventDelivery", 413, retry(BIG));
    await expect("retryEventDelivery", 415, retry(rBody, { type: "text/plain" }));
    await expect("retryEventDelivery", 200, retry(rBody));
    // ACK what comes until the retried delivery is ACKED (its event may then be purged).
    for (let f = await s.nextOfType("event.deliver"); ; f = await s.nextOfType("event.deliver")) {
      assert.equal((await s.ack(f)).type, "ack");
      if (f.body.delivery.id === deliveryId) break;
    }

    // Purged history: 410 for a create from before the boundary, and for the detail of the ACKED delivery.
    const { head } = await readLog(db, owner.namespace_id);
    const purged = await runCli(["purge", "--namespace", "ns", "--before", String(head + 1n)], {
      ORBIT_DATABASE_URL: db.url,
    });
    assert.equal(purged.code, 0, purged.stderr);
    await expect(
      "createSubscription",
      410,
      post("/v1/subscriptions", { name: "old", queue_id: queue, from_sequence: "1" }),
    );
    await expect("getEventDelivery", 410, call({ path: `${deliveries}/${deliveryId}` }));
  });

  it("a deadline that passes: 503 with Retry-After", async () => {
    const c = await db.connect();
    try {
      await c.query("LOCK TABLES credentials WRITE");
      // Every operation that authenticates reads the locked table: all answer at their deadline.
      const cases: [string, Promise<RawResponse>][] = [
        ["getCurrentCredential", call({ path: "/v1/credential" })],
        ["getTask", call({ path: `/v1/tasks/${taskId}` })],
        ["submitTask", post("/v1/tasks", { queue_id: queue, input: 1 })],
        ["cancelTask", post(`/v1/tasks/${taskId}:cancel`, { expected_revision: "1", reason: "r" })],
        [
          "resolveTask",
          post(`/v1/tasks/${taskId}:resolve`, { expected_revision: "1", outcome: "failed", reason: "r" }),
        ],
        ["claimTask", post("/v1/worker/claim", { queue_id: queue }, { key: null })],
        ["completeAttempt", post(`/v1/worker/attempts/${attemptId}:complete`, { outcome: "failed" }, { key: null })],
        ["requeueAttempt", post(`/v1/worker/attempts/${attemptId}:requeue`, { reason: "r" }, { key: null })],
        ["claimTasks", post("/v1/worker/claims", { queue_id: queue, max_tasks: 2 }, { key: null })],
        [
          "completeAttempts",
          post("/v1/worker/completions", { items: [{ attempt_id: attemptId, outcome: "failed" }] }, { key: null }),
        ],
        ["createSubscription", post("/v1/subscriptions", { name: "late", queue_id: queue })],
        ["listSubscriptions", call({ path: `/v1/subscriptions?queue_id=${queue}` })],
        ["getSubscription", call({ path: `/v1/subscriptions/${subId}` })],
        [
          "configureSubscription",
          post(`/v1/subscriptions/${subId}:configure`, { expected_revision: "1", enabled: true, reason: "r" }),
        ],
        ["listEventDeliveries", call({ path: `/v1/subscriptions/${subId}/deliveries` })],
        ["getEventDelivery", call({ path: `/v1/subscriptions/${subId}/deliveries/${NO_ID}` })],
        [
          "retryEventDelivery",
          post(`/v1/subscriptions/${subId}/deliveries/${NO_ID}:retry`, {
            expected_revision: "1",
            reason: "r",
            additional_attempts: 1,
          }),
        ],
      ];
      for (const [op, res] of cases) await expect(op, 503, res);
    } finally {
      await c.query("UNLOCK TABLES");
      await c.end();
    }
  });

  it("an Upgrade offer on another path is ignored: the operation answers as without it (RFC 9110 §7.8)", async () => {
    // curl --http2 on http:// offers h2c on every request; a WebSocket client may offer on
    // any path. Neither is a 404 of a path that exists.
    for (const offer of ["h2c", "websocket"]) {
      const up: [string, string][] = [
        ["Connection", "Upgrade, HTTP2-Settings"],
        ["Upgrade", offer],
        ["HTTP2-Settings", "AAMAAABkAAQCAAAAAAIAAAAA"],
      ];
      await expect("getCurrentCredential", 200, call({ path: "/v1/credential", headers: up }));
      await expect("getHealth", 200, call({ path: "/v1/health", headers: up }, ""));
      const res = await expect(
        "submitTask",
        201,
        call({
          method: "POST",
          path: "/v1/tasks",
          headers: [...up, ["Idempotency-Key", `up-${offer}`]],
          body: JSON.stringify({ queue_id: queue, input: offer }),
        }),
      );
      assert.equal(res.json.data.task.queue_id, queue);
    }
  });

  it("an Expect other than 100-continue is ignored, never a bare 417", async () => {
    await expect("getHealth", 200, call({ path: "/v1/health", headers: [["Expect", "x-later"]] }, ""));
    const body = JSON.stringify({ queue_id: queue, input: "expect" });
    await expect(
      "submitTask",
      201,
      call({
        method: "POST",
        path: "/v1/tasks",
        headers: [
          ["Expect", "x-later"],
          ["Idempotency-Key", "expect"],
        ],
        body,
      }),
    );
  });

  it("states the nesting limit the server enforces on a JsonValue (task input, results)", async () => {
    const nested = (n: number) => `{"queue_id":"${queue}","input":${"[".repeat(n)}${"]".repeat(n)}}`;
    await expect("submitTask", 201, post("/v1/tasks", nested(MAX_JSON_DEPTH - 1)));
    await expect("submitTask", 400, post("/v1/tasks", nested(MAX_JSON_DEPTH)));
    assert.match(
      OPENAPI.components.schemas.JsonValue.description,
      new RegExp(`at most ${MAX_JSON_DEPTH - 1} arrays or objects deep`),
    );
    assert.match(OPENAPI.info.description, new RegExp(`at most ${MAX_JSON_DEPTH} levels deep`));
  });

  it("every path answers each method it lacks with 405, the envelope and an Allow naming exactly its own", async () => {
    // An action path (/v1/tasks/{id}:cancel) fits its resource's template too: GET and HEAD
    // there must not be answered as the resource (404), nor Allow name the resource's GET.
    for (const [path, item] of Object.entries<any>(OPENAPI.paths)) {
      const concrete = path.replace(/\{[a-z_]+\}/g, NO_ID);
      const declared = Object.keys(item)
        .filter((m) => ["get", "post"].includes(m))
        .map((m) => m.toUpperCase());
      // HEAD comes with every GET (openapi.yaml: not an operation of its own).
      const allow = declared.includes("GET") ? ["HEAD", ...declared] : declared;
      for (const other of ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"].filter((m) => !allow.includes(m))) {
        const res = await call({ method: other, path: concrete });
        assert.equal(res.status, 405, `${other} ${path}: ${res.text}`);
        assert.deepEqual(String(res.headers.allow).split(", ").sort(), [...allow].sort(), `${other} ${path}`);
        if (other !== "HEAD")
          assertDeclaredResponse(`${other} ${path}`, OPENAPI.components.responses.MethodNotAllowed, res);
      }
    }
  });

  it("batch worker calls", async () => {
    const submit = () => post("/v1/tasks", { queue_id: queue, input: "batch" });
    for (let i = 0; i < 3; i++) await expect("submitTask", 201, submit());
    const claims = (body: unknown, o = {}) => post("/v1/worker/claims", body, { key: null, ...o });
    // Every QUEUED task of the queue (earlier tests leave some); these three come last.
    const claimed = await expect("claimTasks", 200, claims({ queue_id: queue, max_tasks: 32 }));
    const [a, b, c] = (claimed.json.data.claims as { attempt_id: string }[]).slice(-3).map((x) => x.attempt_id);
    assert.ok(a && b && c, claimed.text);
    await expect("claimTasks", 204, claims({ queue_id: queue, max_tasks: 5 }));
    await expect("claimTasks", 400, claims({ queue_id: queue, max_tasks: 0 }));
    await expect("claimTasks", 401, claims({ queue_id: queue, max_tasks: 1 }, { token: "" }));
    await expect("claimTasks", 403, claims({ queue_id: queue, max_tasks: 1 }, { token: noAction }));
    await expect("claimTasks", 404, claims({ queue_id: other.queues[0]!.id, max_tasks: 1 }));
    await expect("claimTasks", 413, claims(BIG));
    await expect("claimTasks", 415, claims({ queue_id: queue, max_tasks: 1 }, { type: "text/plain" }));

    const completions = (body: unknown, o = {}) => post("/v1/worker/completions", body, { key: null, ...o });
    const one = { items: [{ attempt_id: a, outcome: "succeeded" }] };
    await expect("completeAttempts", 400, completions({ items: [] }));
    await expect("completeAttempts", 401, completions(one, { token: "" }));
    await expect("completeAttempts", 403, completions(one, { token: noAction }));
    await expect("completeAttempts", 413, completions(BIG));
    await expect("completeAttempts", 415, completions(one, { type: "text/plain" }));
    // Every kind of item answer: 200, 404, 409 (a's repeat, with another outcome), 400.
    const mixed = await expect(
      "completeAttempts",
      200,
      completions({
        items: [
          { attempt_id: a, outcome: "succeeded", result: { n: 1 } },
          { attempt_id: NO_ID, outcome: "failed" },
          { attempt_id: b, outcome: "done" },
          { attempt_id: c, outcome: "failed", error: "e" },
        ],
      }),
    );
    assert.deepEqual(
      mixed.json.data.items.map((i: { status: number }) => i.status),
      [200, 404, 400, 200],
    );
    const stale = await expect("completeAttempts", 200, completions({ items: [{ attempt_id: a, outcome: "failed" }] }));
    assert.equal(stale.json.data.items[0].status, 409);
  });

  it("saw every status each operation declares, but those listed as not driven", () => {
    const missing: string[] = [];
    for (const [id, { op }] of OPERATIONS) {
      for (const status of Object.keys(op.responses)) {
        if (NOT_DRIVEN[`*:${status}`] || NOT_DRIVEN[`${id}:${status}`]) continue;
        if (!seen.get(id)?.has(status)) missing.push(`${id} ${status}`);
      }
    }
    assert.deepEqual(missing, []);
  });
});

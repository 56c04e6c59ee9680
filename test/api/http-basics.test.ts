// HTTP basics of docs/protocol.md §1 over a real `orbit serve`: the envelope and headers on every
// response, query-parameter rules, body rules (media type, size, strict JSON, unknown
// fields, aliases), Idempotency-Key rules, 404/405, the management deadline, 500s that
// leak nothing, and graceful shutdown.
import { strict as assert } from "node:assert";
import net from "node:net";
import { gzipSync } from "node:zlib";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { request, type RawRequest } from "../helpers/http.js";
import { assertCommonHeaders, assertContract, assertError } from "../helpers/contract.js";

const ID = "0123456789abcdef0123456789abcdef";
const KEY: [string, string] = ["Idempotency-Key", "create-1"];

interface Answer {
  readonly status: number;
  readonly json: any;
}

/**
 * Writes requests in one write on a fresh connection and reads `count` answers (framed by
 * Content-Length; a 101 ends the reading), or what came within 5 s.
 */
function pipelined(port: number, requests: string, count: number): Promise<Answer[]> {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1", () => socket.write(requests));
    let received = Buffer.alloc(0);
    const answers: Answer[] = [];
    const done = (): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(answers);
    };
    const timer = setTimeout(done, 5000);
    socket.on("error", () => undefined).on("close", done);
    socket.on("data", (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      for (let end = received.indexOf("\r\n\r\n"); end >= 0; end = received.indexOf("\r\n\r\n")) {
        const head = received.subarray(0, end).toString("latin1");
        const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]);
        const length = status === 101 ? 0 : Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
        if (received.length < end + 4 + length) return;
        const body = received.subarray(end + 4, end + 4 + length).toString("utf8");
        answers.push({ status, json: body ? JSON.parse(body) : undefined });
        received = received.subarray(end + 4 + length);
        if (answers.length === count || status === 101) return done();
      }
    });
  });
}

describe("HTTP basics", () => {
  let db: TestDatabase;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  const call = (r: RawRequest) => request(node.url, { token: cred.token, ...r });
  const create = (body: string, headers: [string, string][] = [KEY]) =>
    call({ method: "POST", path: "/v1/subscriptions", headers, body });
  let names = 0;
  /** A valid create body with a name of its own. */
  const validCreate = () => JSON.stringify({ name: `results-${++names}`, queue_id: cred.queues[0]!.id });
  const freshKey = (): [string, string] => ["Idempotency-Key", `key-${names}-${Math.random()}`];

  before(async () => {
    db = await freshDatabase("http_basics");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
    node = await startNode(db.url, { ORBIT_REQUEST_TIMEOUT_MS: "700" });
  });
  after(async () => {
    await node?.stop();
    await db?.drop();
  });

  describe("envelope and headers", () => {
    it("answers the public health check without a token", async () => {
      const res = await request(node.url, { path: "/v1/health" });
      assert.equal(res.status, 200);
      assertContract("getHealth", res);
      assert.deepEqual(res.json.data, { status: "ok" });
    });

    it("serves the contract it implements, byte for byte, to anyone", async () => {
      const { readFileSync } = await import("node:fs");
      const yaml = await request(node.url, { path: "/v1/contract/openapi.yaml" });
      assert.equal(yaml.status, 200);
      assert.match(String(yaml.headers["content-type"]), /^application\/yaml/);
      assertCommonHeaders({ ...yaml, text: "" });
      assert.equal(yaml.text, readFileSync("openapi.yaml", "utf8"));
      const frames = await request(node.url, { path: "/v1/contract/events.schema.json" });
      assert.equal(frames.status, 200);
      assert.match(String(frames.headers["content-type"]), /^application\/schema\+json/);
      assert.equal(frames.text, readFileSync("events.schema.json", "utf8"));
      assertError(await request(node.url, { path: "/v1/contract/openapi.yaml?v=2" }), 400, "INVALID_ARGUMENT");
      assertError(await request(node.url, { path: "/v1/contract/other.yaml" }), 404, "NOT_FOUND");
    });

    it("answers a query string or a body on the public GETs with 400, a status their contract lists", async () => {
      const publicGets = {
        getHealth: "/v1/health",
        getLiveness: "/healthz",
        getReadiness: "/readyz",
        getMetrics: "/metrics",
        getOpenapiDocument: "/v1/contract/openapi.yaml",
        getEventsSchema: "/v1/contract/events.schema.json",
      };
      for (const [op, path] of Object.entries(publicGets)) {
        const withQuery = await request(node.url, { path: `${path}?v=2` });
        const withBody = await request(node.url, { path, body: "{}" });
        for (const res of [withQuery, withBody]) {
          assertError(res, 400, "INVALID_ARGUMENT");
          assertContract(op, res);
        }
        assert.equal(
          withBody.json.error.message,
          "this operation takes no body",
          "refused as a body, not as a malformed request",
        );
      }
    });

    it("uses a well-formed X-Request-ID from the caller and replaces a malformed one", async () => {
      const mine = "abcdefabcdefabcdefabcdefabcdef12";
      const a = await request(node.url, { path: "/v1/health", headers: [["X-Request-ID", mine]] });
      assert.equal(a.headers["x-request-id"], mine);
      assert.equal(a.json.request_id, mine);
      // Exactly 32 lowercase hex (openapi.yaml): upper case, or 32 hex inside a longer value, is replaced.
      for (const offered of ["not-an-id", mine.toUpperCase(), `${mine}0`]) {
        const b = await request(node.url, { path: "/v1/health", headers: [["X-Request-ID", offered]] });
        assert.notEqual(b.headers["x-request-id"], offered);
        assert.match(String(b.headers["x-request-id"]), /^[0-9a-f]{32}$/, offered);
        assertCommonHeaders(b);
      }
    });

    it("answers an unknown path with 404 in the envelope, before authentication", async () => {
      assertError(await request(node.url, { path: "/v1/nothing" }), 404, "NOT_FOUND");
      assertError(await call({ path: "/" }), 404, "NOT_FOUND");
    });

    it("matches paths exactly: a case variant or a trailing slash is an unknown path (404), never an alias", async () => {
      for (const path of ["/v1/credential/", "/V1/CREDENTIAL", "/HEALTHZ", `/v1/Tasks/${ID}`, `/v1/tasks/${ID}/`]) {
        assertError(await call({ path }), 404, "NOT_FOUND");
      }
      const configure = (path: string) =>
        call({
          method: "POST",
          path,
          headers: [freshKey()],
          body: JSON.stringify({ expected_revision: "1", enabled: false, reason: "r" }),
        });
      const created = await create(validCreate(), [freshKey()]);
      assert.equal(created.status, 201, created.text);
      const sub = created.json.data.subscription.id as string;
      // Read exactly, no operation has the action ":Configure": an unknown path.
      assertError(await configure(`/v1/subscriptions/${sub}:Configure`), 404, "NOT_FOUND");
      assertError(await configure(`/V1/subscriptions/${sub}:configure`), 404, "NOT_FOUND");
      assertError(
        await call({ method: "POST", path: "/v1/subscriptions/", headers: [freshKey()], body: validCreate() }),
        404,
        "NOT_FOUND",
      );
      assert.equal(
        (await call({ path: `/v1/subscriptions/${sub}` })).json.data.revision,
        "1",
        "nothing was configured",
      );
    });

    it("answers a known path with the wrong method with 405 and Allow", async () => {
      const res = await call({ method: "DELETE", path: `/v1/tasks/${ID}` });
      assertError(res, 405, "METHOD_NOT_ALLOWED");
      assert.match(String(res.headers.allow), /GET/);
      assertError(await call({ method: "POST", path: "/v1/credential" }), 405, "METHOD_NOT_ALLOWED");
      // Any method: OPTIONS (no CORS preflight is served) and TRACE too, never 200 or 501.
      for (const method of ["OPTIONS", "TRACE", "PATCH"]) {
        const other = await call({ method, path: "/v1/tasks" });
        assertError(other, 405, "METHOD_NOT_ALLOWED");
        assert.equal(other.headers.allow, "POST", method);
      }
    });

    it("answers an action path asked with another method with 405 and Allow: POST, before authentication", async () => {
      // Each also fits its resource's template with "{id}:action" as the id: GET and HEAD
      // must not be answered as that id (404), nor other methods with the resource's GET in
      // Allow.
      const actions = [
        `/v1/subscriptions/${ID}:configure`,
        `/v1/subscriptions/${ID}/deliveries/${ID}:retry`,
        `/v1/tasks/${ID}:cancel`,
        `/v1/tasks/${ID}:resolve`,
        `/v1/worker/attempts/${ID}:complete`,
        `/v1/worker/attempts/${ID}:requeue`,
        "/v1/tasks/not-an-id:cancel",
      ];
      for (const path of actions) {
        for (const method of ["GET", "HEAD", "PUT", "DELETE", "OPTIONS"]) {
          for (const res of [await call({ method, path }), await request(node.url, { method, path })]) {
            assert.equal(res.status, 405, `${method} ${path}: ${res.text}`);
            assert.equal(res.headers.allow, "POST", `${method} ${path}`);
            if (method !== "HEAD") assertError(res, 405, "METHOD_NOT_ALLOWED");
          }
        }
      }
      // The resource itself and its case variants keep their own methods.
      assert.equal((await call({ method: "PUT", path: `/v1/tasks/${ID}` })).headers.allow, "HEAD, GET");
      // An action no operation has — a case variant, another resource's action, a typo — is
      // an unknown path to every method: 404 with no Allow, for POST as for GET.
      for (const path of [
        `/v1/tasks/${ID}:Cancel`,
        `/v1/tasks/${ID}:retry`,
        `/v1/subscriptions/${ID}:cancel`,
        `/v1/tasks/${ID}:`,
        `/v1/worker/attempts/${ID}:heartbeat`,
      ]) {
        for (const method of ["POST", "GET", "HEAD", "PUT"]) {
          for (const res of [
            await call({ method, path, headers: [freshKey()], ...(method === "POST" ? { body: "{}" } : {}) }),
            await request(node.url, { method, path }),
          ]) {
            assert.equal(res.status, 404, `${method} ${path}: ${res.text}`);
            assert.equal(res.headers.allow, undefined, `${method} ${path}`);
            if (method !== "HEAD") assertError(res, 404, "NOT_FOUND");
          }
        }
      }
      // POST is still the action's: authentication, then the task's scope.
      assertError(await request(node.url, { method: "POST", path: `/v1/tasks/${ID}:cancel` }), 401, "UNAUTHENTICATED");
      assertError(
        await call({ method: "POST", path: `/v1/tasks/${ID}:cancel`, headers: [freshKey()], body: "{}" }),
        404,
        "NOT_FOUND",
      );
    });

    it("answers CONNECT in the envelope, as any other method, then closes the connection", async () => {
      // Node destroys a CONNECT's socket when nobody listens for it: no answer at all.
      const send = (req: string) =>
        new Promise<string>((resolve, reject) => {
          const s = net.connect(node.port, "127.0.0.1", () => s.write(req));
          let out = "";
          s.on("data", (d) => (out += d));
          s.on("close", () => resolve(out));
          s.on("error", reject);
        });
      const unknown = await send("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n");
      assert.match(unknown, /^HTTP\/1\.1 404 /);
      assert.match(unknown, /X-Request-ID: [0-9a-f]{32}/);
      assert.match(unknown, /Cache-Control: no-store/);
      assert.match(unknown, /"code":"NOT_FOUND"/);
      const known = await send("CONNECT /v1/tasks HTTP/1.1\r\nHost: x\r\n\r\n");
      assert.match(known, /^HTTP\/1\.1 405 /);
      assert.match(known, /\r\nAllow: POST\r\n/);
      assert.match(known, /"code":"METHOD_NOT_ALLOWED"/);
    });

    it("answers every pipelined request that offers an Upgrade off the event endpoint, in order", async () => {
      // Node hands each such request over with its parser gone; the node gives it back to a
      // fresh parser, which must not queue its answer where nothing would ever write it: all
      // three pipelined ones are answered.
      const offer =
        "Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n";
      const get = (path: string, headers = "") => `GET ${path} HTTP/1.1\r\nHost: x\r\n${headers}\r\n`;
      const auth = `Authorization: Bearer ${cred.token}\r\n`;
      const three = await pipelined(
        node.port,
        get("/v1/credential", offer + auth) + get("/v1/nothing", offer) + get("/readyz", offer),
        3,
      );
      assert.deepEqual(
        three.map((a) => a.status),
        [200, 404, 200],
      );
      assert.equal(three[0]!.json.data.credential_id, cred.credential_id);
      assert.equal(three[1]!.json.error.code, "NOT_FOUND");
      assert.equal(three[2]!.json.data.status, "ready");
      // Mixed with plain requests, and with an upgrade of the event endpoint last: its 101
      // comes after the answers before it.
      const mixed = await pipelined(
        node.port,
        get("/v1/health") + get("/healthz", offer) + get(`/v1/tasks/${ID}`, auth),
        3,
      );
      assert.deepEqual(
        mixed.map((a) => a.status),
        [200, 200, 404],
      );
      const ws =
        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: orbit.events.v1\r\n";
      const upgraded = await pipelined(
        node.port,
        get("/v1/credential", auth) + get("/v1/events/connect", ws + auth),
        2,
      );
      assert.deepEqual(
        upgraded.map((a) => a.status),
        [200, 101],
      );
    });

    it("closes a connection it answered outside the HTTP server once the client had 2 s to close it", async () => {
      // A refused upgrade, a request Node cannot parse, a CONNECT: answered and ended, they
      // must not stay open as long as the client keeps its half open. A write from the
      // client after the linger is refused (a reset) once the node has let go of the
      // socket.
      const lingered = (req: string) =>
        new Promise<string>((resolve) => {
          const s = net.connect({ port: node.port, host: "127.0.0.1", allowHalfOpen: true }, () => s.write(req));
          let out = "";
          s.on("data", (d) => (out += d));
          s.once("end", () =>
            setTimeout(() => {
              s.write("x");
              setTimeout(() => s.writable && s.write("x"), 200);
            }, 2500),
          );
          const giveUp = setTimeout(() => resolve(`still open: ${out.slice(0, 12)}`), 6000);
          s.once("error", () => (clearTimeout(giveUp), resolve(out.slice(0, 12))));
          s.once("close", () => (clearTimeout(giveUp), s.destroy(), resolve(out.slice(0, 12))));
        });
      const upgrade = `GET /v1/events/connect HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n`;
      const answers = await Promise.all([
        lingered(upgrade),
        lingered("CONNECT example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n"),
      ]);
      assert.deepEqual(answers, ["HTTP/1.1 401", "HTTP/1.1 404"]);
    });

    it("answers HEAD on every GET path with the GET's status and headers and no body, as openapi.yaml says", async () => {
      for (const path of ["/v1/credential", `/v1/tasks/${ID}`]) {
        const [get, head] = [await call({ path }), await call({ method: "HEAD", path })];
        assert.equal(head.status, get.status, path);
        assert.equal(head.text, "", path);
        assert.equal(head.headers["content-type"], get.headers["content-type"], path);
        assert.match(String(head.headers["x-request-id"]), /^[0-9a-f]{32}$/);
      }
      assert.equal((await call({ method: "DELETE", path: `/v1/tasks/${ID}` })).headers.allow, "HEAD, GET");
      assert.equal((await call({ method: "HEAD", path: "/v1/tasks" })).status, 405, "no GET, no HEAD");
    });

    it("answers a path id that cannot exist with 404", async () => {
      for (const bad of ["ABCDEF0123456789abcdef0123456789", "123", `${ID}0`, "%00"]) {
        const res = await call({ path: `/v1/subscriptions/${bad}` });
        assertError(res, 404, "NOT_FOUND");
        assertContract("getSubscription", res);
      }
    });

    it("answers a well-formed id that does not exist with 404 in the envelope", async () => {
      const res = await call({ path: `/v1/subscriptions/${ID}` });
      assertError(res, 404, "NOT_FOUND");
      assertContract("getSubscription", res);
    });

    it("answers an unparsable request with 400 in the envelope", async () => {
      const text = await new Promise<string>((resolve, reject) => {
        const s = net.connect(node.port, "127.0.0.1", () => s.write("BROKEN\u0000 / HTTP/1.1\r\n\r\n"));
        let out = "";
        s.on("data", (d) => (out += d));
        s.on("end", () => resolve(out));
        s.on("error", reject);
      });
      assert.match(text, /^HTTP\/1\.1 400 /);
      assert.match(text, /X-Request-ID: [0-9a-f]{32}/);
      assert.match(text, /Cache-Control: no-store/);
      assert.match(text, /"code":"INVALID_ARGUMENT"/);
    });
  });

  describe("query parameters", () => {
    it("rejects any query string on an endpoint that takes none", async () => {
      for (const q of ["?x=1", "?", "?queue_id=" + ID]) {
        assertError(await call({ path: `/v1/credential${q}` }), 400, "INVALID_ARGUMENT");
      }
    });

    it("rejects unknown, repeated, case-variant and non-canonical parameters on the list endpoints", async () => {
      const q = cred.queues[0]!.id;
      const bad = [
        "",
        `?queue_id=${q}&queue_id=${q}`,
        `?queue_id=${q}&extra=1`,
        `?Queue_id=${q}`,
        `?queue_id=${q}&limit=01`,
        `?queue_id=${q}&limit=0`,
        `?queue_id=${q}&limit=101`,
        `?queue_id=${q}&limit=1.0`,
        `?queue_id=${q}&limit=%2B5`,
        `?queue_id=${q}&limit=`,
        `?queue_id=${q.toUpperCase()}`,
        `?queue_id=${q}&cursor=%ZZ`,
      ];
      for (const query of bad) {
        const res = await call({ path: `/v1/subscriptions${query}` });
        assertError(res, 400, "INVALID_ARGUMENT");
        assertContract("listSubscriptions", res);
      }
      const own = (await create(validCreate(), [freshKey()])).json.data.subscription.id;
      const states = await call({ path: `/v1/subscriptions/${own}/deliveries?state=leased` });
      assertError(states, 400, "INVALID_ARGUMENT");
      assertContract("listEventDeliveries", states);
    });

    it("checks the target's scope before its query string or an unwanted body: 404 for another's, 400 for one's own", async () => {
      const other = await bootstrap(db.url, {
        namespace: "elsewhere",
        application: "app",
        queues: ["q"],
        eventAccess: true,
      });
      const as = (token: string, r: RawRequest) => request(node.url, { token, ...r });
      const theirQueue = other.queues[0]!.id;
      const ourQueue = cred.queues[0]!.id;
      const theirs = (
        await as(other.token, {
          method: "POST",
          path: "/v1/subscriptions",
          headers: [freshKey()],
          body: JSON.stringify({ name: "theirs", queue_id: theirQueue }),
        })
      ).json.data.subscription;
      const ours = (await create(validCreate(), [freshKey()])).json.data.subscription;
      const theirTask = (
        await as(other.token, {
          method: "POST",
          path: "/v1/tasks",
          headers: [freshKey()],
          body: JSON.stringify({ queue_id: theirQueue, input: 1 }),
        })
      ).json.data.task;
      const ourTask = (
        await call({
          method: "POST",
          path: "/v1/tasks",
          headers: [freshKey()],
          body: JSON.stringify({ queue_id: ourQueue, input: 1 }),
        })
      ).json.data.task;
      const cases: [string, RawRequest, RawRequest][] = [
        [
          "getSubscription",
          { path: `/v1/subscriptions/${theirs.id}?x=1` },
          { path: `/v1/subscriptions/${ours.id}?x=1` },
        ],
        [
          "getSubscription",
          { path: `/v1/subscriptions/${theirs.id}`, body: "{}" },
          { path: `/v1/subscriptions/${ours.id}`, body: "{}" },
        ],
        [
          "listEventDeliveries",
          { path: `/v1/subscriptions/${theirs.id}/deliveries?state=leased` },
          { path: `/v1/subscriptions/${ours.id}/deliveries?state=leased` },
        ],
        [
          "listEventDeliveries",
          { path: `/v1/subscriptions/${ID}/deliveries?limit=0` },
          { path: `/v1/subscriptions/${ours.id}/deliveries?limit=0` },
        ],
        [
          "listSubscriptions",
          { path: `/v1/subscriptions?queue_id=${theirQueue}&extra=1` },
          { path: `/v1/subscriptions?queue_id=${ourQueue}&extra=1` },
        ],
        [
          "listSubscriptions",
          { path: `/v1/subscriptions?queue_id=${theirQueue}&limit=101` },
          { path: `/v1/subscriptions?queue_id=${ourQueue}&limit=101` },
        ],
        ["getTask", { path: `/v1/tasks/${theirTask.id}?x=1` }, { path: `/v1/tasks/${ourTask.id}?x=1` }],
      ];
      for (const [op, foreign, own] of cases) {
        const a = await call(foreign);
        assert.equal(a.status, 404, `${op} ${foreign.path}: ${a.text}`);
        assertError(a, 404, "NOT_FOUND");
        assertContract(op, a);
        const b = await call(own);
        assert.equal(b.status, 400, `${op} ${own.path}: ${b.text}`);
        assertError(b, 400, "INVALID_ARGUMENT");
        assertContract(op, b);
      }
      // A queue_id that names no queue (malformed, or repeated) is no target: 400.
      assertError(
        await call({ path: `/v1/subscriptions?queue_id=${theirQueue.toUpperCase()}&extra=1` }),
        400,
        "INVALID_ARGUMENT",
      );
      assertError(
        await call({ path: `/v1/subscriptions?queue_id=${theirQueue}&queue_id=${theirQueue}` }),
        400,
        "INVALID_ARGUMENT",
      );

      // Writes: a query string on another's target is 404; on one's own 400, and nothing is
      // written — the same key without the query string then makes the first write.
      const pause = JSON.stringify({ expected_revision: "1", enabled: false, reason: "r" });
      assertError(
        await call({
          method: "POST",
          path: `/v1/subscriptions/${theirs.id}:configure?x=1`,
          headers: [freshKey()],
          body: pause,
        }),
        404,
        "NOT_FOUND",
      );
      const key = freshKey();
      assertError(
        await call({ method: "POST", path: `/v1/subscriptions/${ours.id}:configure?x=1`, headers: [key], body: pause }),
        400,
        "INVALID_ARGUMENT",
      );
      const paused = await call({
        method: "POST",
        path: `/v1/subscriptions/${ours.id}:configure`,
        headers: [key],
        body: pause,
      });
      assert.equal(paused.status, 200, paused.text);
      assert.equal(paused.json.data.deduplicated, false);
      assert.equal(paused.json.data.subscription.revision, "2");
      const submit = (queue: string) => JSON.stringify({ queue_id: queue, input: "q" });
      assertError(
        await call({ method: "POST", path: "/v1/tasks?x=1", headers: [freshKey()], body: submit(theirQueue) }),
        404,
        "NOT_FOUND",
      );
      const taskKey = freshKey();
      assertError(
        await call({ method: "POST", path: "/v1/tasks?x=1", headers: [taskKey], body: submit(ourQueue) }),
        400,
        "INVALID_ARGUMENT",
      );
      const submitted = await call({ method: "POST", path: "/v1/tasks", headers: [taskKey], body: submit(ourQueue) });
      assert.equal(submitted.status, 201, submitted.text);
      assert.equal(submitted.json.data.deduplicated, false);
      assert.equal(
        (await as(other.token, { path: `/v1/subscriptions/${theirs.id}` })).json.data.revision,
        "1",
        "another's subscription is untouched",
      );
      // Without a target (the caller's own credential) the query string is refused at once.
      assertError(await call({ path: "/v1/credential?x=1" }), 400, "INVALID_ARGUMENT");
    });

    it("accepts the declared parameters", async () => {
      const res = await call({ path: `/v1/subscriptions?queue_id=${cred.queues[0]!.id}&limit=100` });
      assert.notEqual(res.status, 400, res.text);
    });
  });

  describe("bodies", () => {
    it("accepts a valid body", async () => {
      const res = await create(validCreate(), [freshKey()]);
      assert.equal(res.status, 201, res.text);
    });

    it("requires application/json", async () => {
      for (const type of ["text/plain", "application/json; charset=latin1", "application/jsonx"]) {
        const res = await call({
          method: "POST",
          path: "/v1/subscriptions",
          headers: [KEY, ["Content-Type", type]],
          body: validCreate(),
        });
        assertError(res, 415, "UNSUPPORTED_MEDIA_TYPE");
        assertContract("createSubscription", res);
      }
      // Type, subtype, parameter name and charset are case-insensitive, a parameter value may
      // be quoted and OWS may precede the ';' (RFC 9110 §8.3.1, §5.6.6).
      for (const type of [
        "application/json; charset=utf-8",
        "Application/JSON; Charset=UTF-8",
        'application/json;charset="utf-8"',
        "application/json ; charset=utf-8",
      ]) {
        const ok = await call({
          method: "POST",
          path: "/v1/subscriptions",
          headers: [freshKey(), ["Content-Type", type]],
          body: validCreate(),
        });
        assert.equal(ok.status, 201, `${type}: ${ok.text}`);
      }
      // A body with no Content-Type at all is not labelled application/json (the helper
      // always labels one, so this request is written by hand).
      const body = validCreate();
      const [unlabelled] = await pipelined(
        node.port,
        `POST /v1/subscriptions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${cred.token}\r\nIdempotency-Key: ${freshKey()[1]}\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
        1,
      );
      assert.equal(unlabelled?.status, 415);
      assert.equal(unlabelled?.json.error.code, "UNSUPPORTED_MEDIA_TYPE");
    });

    it("refuses a repeated Content-Type (415), whichever comes first", async () => {
      // Node keeps the first and drops the rest: application/json then text/plain would be taken.
      for (const pair of [
        ["application/json", "text/plain"],
        ["application/json", "application/json"],
        ["text/plain", "application/json"],
      ]) {
        const key = freshKey();
        const res = await call({
          method: "POST",
          path: "/v1/subscriptions",
          headers: [key, ...pair.map((t): [string, string] => ["Content-Type", t])],
          body: validCreate(),
        });
        assertError(res, 415, "UNSUPPORTED_MEDIA_TYPE");
        assert.match(res.json.error.message, /repeated/, pair.join(", "));
        assertContract("createSubscription", res);
        // Nothing was written under the key: the same key with one label creates.
        const once = await call({ method: "POST", path: "/v1/subscriptions", headers: [key], body: validCreate() });
        assert.equal(once.status, 201, once.text);
      }
    });

    it("refuses a body with a content coding (415), rather than reading it as plain JSON", async () => {
      // Read as if plain, compressed JSON would get "the body is not valid UTF-8", and plain
      // JSON labelled gzip would be taken.
      const body = validCreate();
      for (const [coding, bytes] of [
        ["gzip", gzipSync(body)],
        ["gzip", body],
        ["br", body],
      ] as const) {
        const res = await call({
          method: "POST",
          path: "/v1/subscriptions",
          headers: [freshKey(), ["Content-Encoding", coding]],
          body: bytes,
        });
        assertError(res, 415, "UNSUPPORTED_MEDIA_TYPE");
        assertContract("createSubscription", res);
      }
      // Content codings are case-insensitive (RFC 9110 §8.4.1).
      for (const coding of ["identity", "IDENTITY"]) {
        const identity = await call({
          method: "POST",
          path: "/v1/subscriptions",
          headers: [freshKey(), ["Content-Encoding", coding]],
          body: validCreate(),
        });
        assert.equal(identity.status, 201, identity.text);
      }
    });

    it("refuses bodies over 512 KiB with 413 and takes one of exactly 512 KiB, chunked or with Content-Length", async () => {
      const limit = 512 * 1024;
      /** A valid create body of exactly `bytes` bytes. */
      const sized = (bytes: number) => {
        const body = validCreate();
        return body.replace("{", "{" + " ".repeat(bytes - body.length));
      };
      // The helper sends a body chunked unless a Content-Length is given: the size is then
      // counted as the body arrives, else decided from the declared length first.
      const declared = (body: string): [string, string] => ["Content-Length", String(Buffer.byteLength(body))];
      for (const length of [false, true]) {
        const big = sized(limit + 1);
        const res = await create(big, [freshKey(), ...(length ? [declared(big)] : [])]);
        assertError(res, 413, "PAYLOAD_TOO_LARGE");
        assertContract("createSubscription", res);
        const exact = sized(limit);
        assert.equal(Buffer.byteLength(exact), limit);
        const ok = await create(exact, [freshKey(), ...(length ? [declared(exact)] : [])]);
        assert.equal(ok.status, 201, `${length ? "with Content-Length" : "chunked"}: ${ok.text.slice(0, 200)}`);
      }
    });

    it("answers 413 for a declared oversized body only once the body is in, so the client still writing gets the answer", async () => {
      // 413 is decided from Content-Length before a byte of the body is read. Answering at
      // once and closing would leave a client still writing with EPIPE instead of the 413,
      // so the node reads and discards such a body first.
      const half = "x".repeat(300 * 1024);
      const u = new URL(node.url);
      const socket = net.connect(Number(u.port), u.hostname);
      let received = "";
      socket.on("data", (c: Buffer) => (received += c.toString("latin1")));
      const closed = new Promise((r) => socket.once("close", r));
      socket.write(
        `POST /v1/tasks HTTP/1.1\r\nHost: ${u.host}\r\nAuthorization: Bearer ${cred.token}\r\nIdempotency-Key: drain-1\r\n` +
          `Content-Type: application/json\r\nContent-Length: ${2 * half.length + 2}\r\nConnection: close\r\n\r\n"${half}`,
      );
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(received, "", "no answer while the declared body is still coming");
      socket.end(`${half}"`);
      await closed;
      assert.match(received, /^HTTP\/1\.1 413 /);
      assert.match(received, /"code":"PAYLOAD_TOO_LARGE"/);
    });

    it("processes at most 4 pipelined requests of a connection at once: the next is 503 with Connection: close", async () => {
      // 64 requests in one write, their answers unread: Node starts every one it parses, so
      // without the limit a pipelining client that never reads grows the node without bound.
      const u = new URL(node.url);
      const socket = net.connect(Number(u.port), u.hostname);
      let received = "";
      socket.on("data", (c: Buffer) => (received += c.toString("latin1")));
      socket.on("error", () => undefined);
      const closed = new Promise<boolean>((r) => socket.once("close", () => r(true)));
      const get = `GET /v1/tasks/${ID} HTTP/1.1\r\nHost: ${u.host}\r\nAuthorization: Bearer ${cred.token}\r\n\r\n`;
      socket.write(get.repeat(64));
      try {
        assert.ok(
          await Promise.race([closed, new Promise<boolean>((r) => setTimeout(() => r(false), 10000))]),
          "the connection is closed after the 503",
        );
        const statuses = [...received.matchAll(/HTTP\/1\.1 (\d+) /g)].map((m) => Number(m[1]));
        assert.deepEqual(statuses, [404, 404, 404, 404, 503], "4 answered, then one 503 and nothing after it");
        const last = received.slice(received.lastIndexOf("HTTP/1.1 "));
        assert.match(last, /\r\nRetry-After: 1\r\n/);
        assert.match(last, /\r\nConnection: close\r\n/i);
        assert.match(last, /"code":"UNAVAILABLE"/);
      } finally {
        socket.destroy();
      }
      // A connection that sends the next request after each answer is never refused.
      for (let i = 0; i < 8; i++) assert.equal((await call({ path: `/v1/tasks/${ID}` })).status, 404);
    });

    it("closes the connection after answering a body that stalls, so no second answer follows on it", async () => {
      // A body that never completes gets the deadline's 503. Kept alive, the connection would go
      // on reading the trickle, and Node's request timeout later write a second answer (a
      // 400) on it, after the 503: an answer to no request.
      const u = new URL(node.url);
      const socket = net.connect(Number(u.port), u.hostname);
      let received = "";
      let answeredAt = 0;
      socket.on("data", (c: Buffer) => {
        received += c.toString("latin1");
        answeredAt ||= Date.now();
      });
      const closed = new Promise<number>((r) => socket.once("close", () => r(Date.now())));
      socket.on("error", () => undefined);
      socket.write(
        `POST /v1/tasks HTTP/1.1\r\nHost: ${u.host}\r\nAuthorization: Bearer ${cred.token}\r\nIdempotency-Key: stall-1\r\n` +
          `Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"input":"`,
      );
      const trickle = setInterval(() => socket.writable && socket.write("x"), 200);
      try {
        const at = await Promise.race([closed, new Promise<number>((r) => setTimeout(() => r(0), 8000))]);
        assert.match(received, /^HTTP\/1\.1 503 /);
        assert.match(received, /"code":"UNAVAILABLE"/);
        assert.ok(at > 0, "the connection is closed after the answer");
        assert.ok(at - answeredAt < 1000, `closed ${at - answeredAt} ms after the answer`);
        assert.equal(received.split("HTTP/1.1 ").length - 1, 1, "one answer on the connection");
      } finally {
        clearInterval(trickle);
        socket.destroy();
      }
    });

    it("rejects malformed JSON, duplicate keys at any depth, unknown fields and case-variant aliases", async () => {
      const q = cred.queues[0]!.id;
      const bad = [
        "",
        "{",
        "[]",
        "null",
        `{"name":"a","queue_id":"${q}",}`,
        `{"name":"a","name":"b","queue_id":"${q}"}`,
        `{"name":"a","queue_id":"${q}","types":[],"\\u006eame":"c"}`,
        `{"name":"a","queue_id":"${q}","extra":1}`,
        `{"Name":"a","queue_id":"${q}"}`,
        `{"name":"a","QUEUE_ID":"${q}"}`,
        `{"name":"a","queue_id":"${q}","from_sequence":"01"}`,
        `{"name":"a","queue_id":"${q}","from_sequence":"18446744073709551616"}`,
        `{"name":"a","queue_id":"${q}","from_sequence":12}`,
        `{"name":"a","queue_id":"${q}","max_pending":1e400}`,
        // Fractions a double reads as whole: 1000 (the maximum) and 0 (the default).
        `{"name":"a","queue_id":"${q}","max_pending":999.99999999999999999}`,
        `{"name":"a","queue_id":"${q}","max_pending":1e-400}`,
        `{"name":"a","queue_id":"${q}","max_attempts":99.99999999999999999}`,
        `{"name":"a","queue_id":"${q}","types":["task.requeued"]}`,
        `{"name":"-a","queue_id":"${q}"}`,
        '\ufeff{"name":"a"}',
      ];
      for (const body of bad) {
        const res = await create(body);
        assertError(res, 400, "INVALID_ARGUMENT");
        assertContract("createSubscription", res);
      }
      const invalidUtf8 = await create(Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x7d]) as unknown as string);
      assertError(invalidUtf8, 400, "INVALID_ARGUMENT");
    });

    it("rejects a body that would be valid but for a BOM or one byte that is not UTF-8, rather than decoding it leniently", async () => {
      // The entries of the list above are invalid for other reasons too; these are not.
      const body = validCreate();
      assertError(await create(`\ufeff${body}`, [freshKey()]), 400, "INVALID_ARGUMENT");
      assert.equal((await create(body, [freshKey()])).status, 201, "the same body without the BOM");
      // A task's input takes any string, so only the decoding can refuse 0xff (not U+FFFD).
      const submit = (input: Buffer) =>
        call({
          method: "POST",
          path: "/v1/tasks",
          headers: [freshKey()],
          body: Buffer.concat([
            Buffer.from(`{"queue_id":"${cred.queues[0]!.id}","input":"a`),
            input,
            Buffer.from('b"}'),
          ]),
        });
      const bad = await submit(Buffer.from([0xff]));
      assertError(bad, 400, "INVALID_ARGUMENT");
      assertContract("submitTask", bad);
      assert.equal((await submit(Buffer.from("\u00e9"))).status, 201, "the same body with é");
    });

    it("rejects a body on an operation that takes none, chunked or with Content-Length, and takes an empty one", async () => {
      for (const headers of [[], [["Content-Length", "2"]]] as [string, string][][]) {
        const res = await call({ path: "/v1/credential", headers, body: "{}" });
        assertError(res, 400, "INVALID_ARGUMENT");
      }
      // Content-Length: 0 declares no content: some clients send it on every request.
      const empty = await call({ path: "/v1/credential", headers: [["Content-Length", "0"]] });
      assert.equal(empty.status, 200, empty.text);
    });
  });

  describe("Idempotency-Key", () => {
    it("is required on management writes, 1-128 printable ASCII, given once", async () => {
      const cases: [string, [string, string][]][] = [
        ["missing", []],
        ["too long", [["Idempotency-Key", "k".repeat(129)]]],
        ["control character", [["Idempotency-Key", "a\tb"]]],
        ["repeated", [KEY, KEY]],
      ];
      for (const [what, headers] of cases) {
        const res = await create(validCreate(), headers);
        assertError(res, 400, "INVALID_ARGUMENT");
        assert.match(res.json.error.message, /Idempotency-Key/, what);
      }
      assert.equal((await create(validCreate(), [["Idempotency-Key", "k".repeat(128)]])).status, 201);
    });

    it("is not needed by worker calls", async () => {
      const res = await call({
        method: "POST",
        path: "/v1/worker/claim",
        body: JSON.stringify({ queue_id: cred.queues[0]!.id }),
      });
      assert.notEqual(res.status, 400, res.text);
    });
  });

  describe("absolute-form request targets (RFC 9112 §3.2.2)", () => {
    const host = () => `127.0.0.1:${node.port}`;
    const ws =
      "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
    const get = (target: string, headers = "", hostHeader = host()) =>
      `GET ${target} HTTP/1.1\r\nHost: ${hostHeader}\r\nAuthorization: Bearer ${cred.token}\r\n${headers}\r\n`;
    const one = async (req: string) => (await pipelined(node.port, req, 1))[0]!;

    it("upgrades an absolute-form target naming this host like its path, never with a 426 that blames the subprotocol", async () => {
      // Taken for a plain request, it would get 426 "Sec-WebSocket-Protocol orbit.events.v1 is required", offered or not.
      const offered = `${ws}Sec-WebSocket-Protocol: orbit.events.v1\r\n`;
      assert.equal((await one(get(`http://${host()}/v1/events/connect`, offered))).status, 101);
      assert.equal(
        (await one(get(`HTTP://${host().toUpperCase()}/v1/events/connect`, offered))).status,
        101,
        "scheme and host are case-insensitive",
      );
      const without = await one(get(`http://${host()}/v1/events/connect`, ws));
      assert.equal(without.status, 426, "the subprotocol is still required");
      assert.equal(without.json.error.code, "PROTOCOL_REQUIRED");
      const query = await one(get(`http://${host()}/v1/events/connect?x=1`, offered));
      assert.equal(query.status, 400, "a query string is still refused");
    });

    it("answers an absolute-form target naming another host or scheme with 400 in the envelope, upgrade or not", async () => {
      const offered = `${ws}Sec-WebSocket-Protocol: orbit.events.v1\r\n`;
      for (const req of [
        get("http://other.example/v1/events/connect", offered),
        get(`http://${host()}/v1/events/connect`, offered, "other.example"),
        get(`ws://${host()}/v1/events/connect`, offered),
        get("http://other.example/v1/credential"),
        get(`http://user@${host()}/v1/credential`),
        get(`ftp://${host()}/v1/credential`),
      ]) {
        const res = await one(req);
        assert.equal(res.status, 400, req.split("\r\n")[0]);
        assert.equal(res.json.error.code, "INVALID_ARGUMENT");
        assert.match(res.json.error.message, /absolute request target/);
      }
    });

    it("answers a plain absolute-form request naming this host as its path", async () => {
      const res = await one(get(`http://${host()}/v1/credential`));
      assert.equal(res.status, 200);
      assert.equal(res.json.data.credential_id, cred.credential_id);
      assert.equal((await one(get(`http://${host()}/v1/tasks/${ID}`))).status, 404);
      assert.equal((await one(get(`http://${host()}/v1/credential?x=1`))).status, 400, "its query is the request's");
      assert.equal((await one(get(`http://${host()}`))).status, 404, "an empty path is /");
    });
  });

  describe("the event endpoint over plain HTTP", () => {
    it("needs the upgrade: 426 PROTOCOL_REQUIRED after authentication", async () => {
      assertError(await request(node.url, { path: "/v1/events/connect" }), 401, "UNAUTHENTICATED");
      const res = await call({ path: "/v1/events/connect" });
      assertError(res, 426, "PROTOCOL_REQUIRED");
      assertContract("connectEvents", res);
    });
  });

  describe("failures", () => {
    it("answers 503 UNAVAILABLE with Retry-After when the deadline passes, and recovers", async () => {
      const c = await db.connect();
      try {
        // Hold a write lock on the table authentication reads: the request cannot finish.
        await c.query("LOCK TABLES credentials WRITE");
        const started = Date.now();
        const res = await call({ path: "/v1/credential" });
        assertError(res, 503, "UNAVAILABLE");
        assert.equal(res.headers["retry-after"], "1");
        assert.ok(Date.now() - started < 5000, "answered at the deadline, not when the lock went");
      } finally {
        await c.query("UNLOCK TABLES");
        await c.end();
      }
      const res = await call({ path: "/v1/credential" });
      assert.equal(res.status, 200);
    });

    it("gives a management request 8 s by default: 503 at that deadline, not sooner or much later", async function () {
      // Protocol §1: management requests time out on the server after 8 s. The other tests
      // shorten it (ORBIT_REQUEST_TIMEOUT_MS); this node runs with the default.
      this.timeout(30000);
      const plain = await startNode(db.url);
      const c = await db.connect();
      try {
        await c.query("LOCK TABLES credentials WRITE");
        const started = Date.now();
        const res = await request(plain.url, {
          token: cred.token,
          path: `/v1/subscriptions?queue_id=${cred.queues[0]!.id}`,
        });
        const elapsed = Date.now() - started;
        assertError(res, 503, "UNAVAILABLE");
        assert.ok(elapsed >= 7900 && elapsed < 10000, `answered after ${elapsed} ms`);
      } finally {
        await c.query("UNLOCK TABLES");
        await c.end();
        await plain.stop();
      }
    });

    it("answers an internal failure with a bare 500: no SQL, no stack, no secret", async () => {
      const c = await db.connect();
      try {
        // A column the code reads is gone: a schema the code does not know (a missing table
        // is a database not migrated yet, 503: tx.ts isUnavailableError).
        await c.query("ALTER TABLE credential_queues RENAME COLUMN queue_id TO queue_id_gone");
        const res = await call({ path: "/v1/credential" });
        assertError(res, 500, "INTERNAL");
        assertContract("getCurrentCredential", res);
        for (const leak of [
          "credential_queues",
          "queue_id",
          "Unknown column",
          "SELECT",
          "at ",
          ".js",
          "ER_",
          cred.token.slice(-43),
        ]) {
          assert.ok(!res.text.includes(leak), `response leaks ${leak}`);
        }
        const logs = node.lines.join("\n");
        for (const leak of ["credential_queues", "queue_id_gone", "SELECT", "    at "])
          assert.ok(!logs.includes(leak), `log leaks ${leak}`);
      } finally {
        await c.query("ALTER TABLE credential_queues RENAME COLUMN queue_id_gone TO queue_id");
        await c.end();
      }
      assert.equal((await call({ path: "/v1/credential" })).status, 200, "the node still serves");
    });
  });

  describe("logging and shutdown", () => {
    it("logs one JSON line per request with id, route, status and duration", async () => {
      const res = await call({ path: "/v1/credential" });
      const id = res.headers["x-request-id"];
      // The line reaches the test through the node's stderr pipe, which may come after the
      // response: waited for (a bounded wait, not a timing rule).
      const find = () => node.lines.map((l) => JSON.parse(l)).find((o) => o.msg === "request" && o.request_id === id);
      for (const until = Date.now() + 5000; !find() && Date.now() < until;) await new Promise((r) => setTimeout(r, 20));
      const line = find();
      assert.ok(line, "a log line for the request");
      assert.equal(line.route, "getCurrentCredential");
      assert.equal(line.status, 200);
      assert.equal(typeof line.duration_ms, "number");
      assert.ok(!node.lines.join("\n").includes(cred.token.slice(-43)), "no token in any log line");
    });

    it("stops on SIGTERM with exit code 0", async () => {
      const extra = await startNode(db.url);
      const code = await extra.stop("SIGTERM");
      assert.equal(code, 0);
      assert.ok(extra.lines.some((l) => l.includes('"msg":"stopped"')));
    });

    it("keeps an idle keep-alive connection open past Node's 5 s and the 10 s header limit", async function () {
      // docs/operations.md: a balancer in front closes idle connections after 60 s; the node
      // must not close one first (the next request the balancer sends on it would be lost).
      this.timeout(30_000);
      const socket = net.connect(node.port, "127.0.0.1");
      let received = "";
      let closed = false;
      socket.on("data", (c: Buffer) => (received += c.toString("latin1")));
      socket.on("close", () => (closed = true));
      await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
      const get = `GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1:${node.port}\r\n\r\n`;
      socket.write(get);
      await new Promise((r) => setTimeout(r, 11_500));
      assert.equal(closed, false, "the node closed an idle keep-alive connection");
      assert.doesNotMatch(received, /Connection: close/i);
      assert.match(received, /Keep-Alive: timeout=65/i);
      socket.write(get);
      const end = Date.now() + 5000;
      while ((received.match(/HTTP\/1\.1 200 /g) ?? []).length < 2) {
        assert.ok(Date.now() < end, "no answer to the second request");
        await new Promise((r) => setTimeout(r, 20));
      }
      socket.destroy();
    });

    it("answers a request already in flight at SIGTERM with Connection: close", async () => {
      // docs/operations.md, Shutdown: no client may reuse a connection to a node going away.
      const extra = await startNode(db.url);
      const body = validCreate();
      const socket = net.connect(extra.port, "127.0.0.1");
      let received = "";
      socket.on("data", (c: Buffer) => (received += c.toString("latin1")));
      const closed = new Promise<void>((resolve) => socket.on("close", () => resolve()));
      await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
      // HTTP/1.1 without a Connection header: keep-alive unless the server says otherwise.
      socket.write(
        `POST /v1/subscriptions HTTP/1.1\r\nHost: 127.0.0.1:${extra.port}\r\nAuthorization: Bearer ${cred.token}\r\n` +
          `Idempotency-Key: ${freshKey()[1]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body.slice(0, 5)}`,
      );
      await new Promise((r) => setTimeout(r, 300)); // the node is reading the body
      const deadline = Date.now() + 10_000;
      const stopped = extra.stop("SIGTERM");
      while (!extra.lines.some((l) => l.includes('"msg":"shutting down"')) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 20));
      assert.ok(
        extra.lines.some((l) => l.includes('"msg":"shutting down"')),
        "the node began its shutdown",
      );
      socket.write(body.slice(5));
      await closed;
      assert.match(received, /^HTTP\/1\.1 201 /);
      assert.match(received, /\r\nConnection: close\r\n/i);
      assert.equal(await stopped, 0);
    });

    it("stops on SIGINT the same way, with exit code 0", async () => {
      // docs/operations.md: `orbit serve` serves until SIGTERM/SIGINT, then ... exits 0.
      const extra = await startNode(db.url);
      const code = await extra.stop("SIGINT");
      assert.equal(code, 0);
      assert.ok(extra.lines.some((l) => l.includes('"msg":"stopped"')));
    });
  });
});

// The management SDK against a real node: typed calls, typed errors with the protocol's
// codes, and a write whose answer is lost on the network is sent again with the same
// key and comes back as the original receipt — never a second subscription or task.
import { strict as assert } from "node:assert";
import net from "node:net";
import { freshDatabase, MYSQL_PORT, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { startProxy, type Proxy } from "../helpers/proxy.js";
import { OrbitApiError, OrbitClient, OrbitNetworkError, RawJson } from "../../src/sdk/index.js";

describe("management SDK", () => {
  let db: TestDatabase;
  let node: OrbitNode;
  let proxy: Proxy;
  let cred: BootstrapOutput;
  let orbit: OrbitClient;
  let q: string;

  before(async () => {
    db = await freshDatabase("sdk");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q", "w", "b"], eventAccess: true });
    node = await startNode(db.url);
    proxy = await startProxy(node.port);
    orbit = new OrbitClient({ baseUrl: proxy.url, token: cred.token, backoffMs: 20 });
    q = cred.queues[0]!.id;
  });
  after(async () => {
    await proxy?.close();
    await node?.stop();
    await db?.drop();
  });

  it("walks through create, get, list, pause and resume, as docs/protocol.md §8 does", async () => {
    const created = await orbit.createSubscription("sdk-create-1", {
      name: "object-results",
      queue_id: q,
      max_pending: 100,
      max_attempts: 20,
    });
    assert.equal(created.deduplicated, false);
    const current = await orbit.getSubscription(created.subscription.id);
    assert.deepEqual(current, created.subscription);
    const paused = await orbit.configureSubscription(current.id, "sdk-pause-1", {
      expected_revision: current.revision,
      enabled: false,
      reason: "receiver maintenance",
    });
    assert.equal(paused.subscription.enabled, false);
    const resumed = await orbit.configureSubscription(current.id, "sdk-resume-1", {
      expected_revision: paused.subscription.revision,
      enabled: true,
      reason: "back",
    });
    assert.equal(resumed.subscription.revision, "3");
    const list = await orbit.listSubscriptions({ queue_id: q, limit: 10 });
    assert.deepEqual(
      list.items.map((s) => s.id),
      [current.id],
    );
    const deliveries = await orbit.listEventDeliveries(current.id, { state: "PENDING" });
    assert.deepEqual(deliveries.items, []);
  });

  it("surfaces errors as OrbitApiError with the protocol's code and status", async () => {
    await assert.rejects(orbit.getSubscription("0123456789abcdef0123456789abcdef"), (e: unknown) => {
      assert.ok(e instanceof OrbitApiError);
      assert.equal(e.code, "NOT_FOUND");
      assert.equal(e.status, 404);
      assert.match(e.requestId ?? "", /^[0-9a-f]{32}$/);
      return true;
    });
    await assert.rejects(orbit.createSubscription("sdk-bad", { name: "-bad", queue_id: q }), {
      code: "INVALID_ARGUMENT",
    });
    const s = await orbit.createSubscription("sdk-create-2", { name: "second", queue_id: q });
    await assert.rejects(
      orbit.configureSubscription(s.subscription.id, "sdk-stale", {
        expected_revision: "9",
        enabled: false,
        reason: "r",
      }),
      { code: "STATE_CONFLICT", status: 409 },
    );
    const stranger = new OrbitClient({ baseUrl: node.url, token: `orbit_${"0".repeat(32)}_${"A".repeat(43)}` });
    await assert.rejects(stranger.getCurrentCredential(), { code: "UNAUTHENTICATED", status: 401 });
  });

  it("re-sends a write whose answer was lost with the same key: one subscription, the original receipt", async () => {
    proxy.dropResponses(1);
    const before = proxy.dropped;
    const res = await orbit.createSubscription("sdk-lost-answer", { name: "lost-answer", queue_id: q });
    assert.equal(proxy.dropped, before + 1, "the first answer was lost");
    assert.equal(res.deduplicated, true, "the retry found the write already done");
    const all = await orbit.listSubscriptions({ queue_id: q, limit: 100 });
    assert.equal(all.items.filter((s) => s.name === "lost-answer").length, 1);
  });

  it("keeps task input and results exact with RawJson, also across a lost answer", async () => {
    proxy.dropResponses(1);
    const t = await orbit.submitTask("sdk-task-1", { queue_id: q, input: new RawJson('{"n":12345678901234567890}') });
    assert.equal(t.deduplicated, true);
    const claimed = await orbit.claimTask({ queue_id: q, wait_ms: 1000 });
    assert.ok(claimed);
    const done = await orbit.completeAttempt(claimed.attempt_id, {
      outcome: "succeeded",
      result: new RawJson("[1.10, 98765432109876543210]"),
    });
    assert.equal(done.task.result, "[1.10, 98765432109876543210]", "the raw text, exactly as written");
    assert.equal(await orbit.claimTask({ queue_id: q }), undefined, "204 → undefined");
    assert.throws(() => new RawJson("{not json"));
  });

  it("waits the node's Retry-After between retries of a 503 and surfaces it on the error", async () => {
    const slowNode = await startNode(db.url, { ORBIT_REQUEST_TIMEOUT_MS: "300" });
    const c = await db.connect();
    try {
      // Authentication cannot read its table: every attempt ends in 503 with Retry-After: 1.
      await c.query("LOCK TABLES credentials WRITE");
      const impatient = new OrbitClient({ baseUrl: slowNode.url, token: cred.token, retries: 2, backoffMs: 20 });
      const started = Date.now();
      await assert.rejects(impatient.getCurrentCredential(), (e: unknown) => {
        assert.ok(e instanceof OrbitApiError);
        assert.equal(e.code, "UNAVAILABLE");
        assert.equal(e.status, 503);
        assert.match(e.requestId ?? "", /^[0-9a-f]{32}$/);
        assert.equal(e.retryAfterMs, 1000);
        return true;
      });
      assert.ok(
        Date.now() - started >= 2 * 1000,
        `two retries, each at least 1 s after a 503 (took ${Date.now() - started} ms)`,
      );
    } finally {
      await c.query("UNLOCK TABLES");
      await c.end();
      await slowNode.stop();
    }
  });

  it("never sends again a claim whose answer was lost: OrbitNetworkError, and no second task taken", async () => {
    // Retried like a keyed write, a lost claim that had committed would take the next task
    // too, and the first would stay RUNNING until its lease ran out.
    const w = cred.queues[1]!.id;
    const direct = new OrbitClient({ baseUrl: node.url, token: cred.token });
    const first = await direct.submitTask("sdk-claim-1", { queue_id: w, input: 1 });
    const second = await direct.submitTask("sdk-claim-2", { queue_id: w, input: 2 });
    proxy.dropResponses(1);
    const before = proxy.dropped;
    await assert.rejects(orbit.claimTask({ queue_id: w }), (e: unknown) => e instanceof OrbitNetworkError);
    assert.equal(proxy.dropped, before + 1, "the claim reached the node and its answer was lost");
    assert.equal((await direct.getTask(first.task.id)).state, "RUNNING", "the lost claim committed");
    assert.equal((await direct.getTask(second.task.id)).state, "QUEUED", "no second claim was sent");
    // completeAttempt is idempotent by its body: its lost answer is still recovered.
    const claimed = await direct.claimTask({ queue_id: w });
    assert.equal(claimed?.task.id, second.task.id);
    proxy.dropResponses(1);
    const done = await orbit.completeAttempt(claimed!.attempt_id, { outcome: "succeeded" });
    assert.equal(done.task.state, "SUCCEEDED");
  });

  it("sends a claim again when no connection was made, and never after a 503", async () => {
    // Nothing listens on the port at first (connection refused): the request never left,
    // so the retry is safe; a node appears there after ~150 ms.
    const w = cred.queues[1]!.id;
    const direct = new OrbitClient({ baseUrl: node.url, token: cred.token });
    const t = await direct.submitTask("sdk-claim-refused", { queue_id: w, input: 3 });
    const probe = net.createServer();
    await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
    const port = (probe.address() as net.AddressInfo).port;
    await new Promise<void>((r) => probe.close(() => r()));
    const piped = new Set<net.Socket>();
    const late = net.createServer((c) => {
      const up = net.connect(node.port, "127.0.0.1");
      piped.add(c).add(up);
      c.pipe(up).pipe(c);
      c.on("error", () => up.destroy());
      up.on("error", () => c.destroy());
    });
    const timer = setTimeout(() => late.listen(port, "127.0.0.1"), 150);
    try {
      const refusedFirst = new OrbitClient({
        baseUrl: `http://127.0.0.1:${port}`,
        token: cred.token,
        retries: 5,
        backoffMs: 100,
      });
      const claimed = await refusedFirst.claimTask({ queue_id: w });
      assert.equal(claimed?.task.id, t.task.id);
      await direct.completeAttempt(claimed!.attempt_id, { outcome: "succeeded" });
    } finally {
      clearTimeout(timer);
      for (const s of piped) s.destroy();
      await new Promise<void>((r) => (late.listening ? late.close(() => r()) : r()));
    }

    // A 503 is no proof that nothing was claimed (a COMMIT in flight at the deadline, a
    // database connection lost at COMMIT): it is surfaced at once, not sent again. A real
    // node answers 503 to every call here: its database connections are cut and refused.
    // Its own counter says how many calls reached it.
    const dbProxy = await startProxy(MYSQL_PORT);
    const cutOff = await startNode(db.urlVia(dbProxy));
    try {
      dbProxy.cut();
      const c = new OrbitClient({ baseUrl: cutOff.url, token: cred.token, retries: 2, backoffMs: 1 });
      await assert.rejects(c.claimTask({ queue_id: w }), { code: "UNAVAILABLE", status: 503 });
      await assert.rejects(c.completeAttempt("a".repeat(32), { outcome: "succeeded" }), {
        code: "UNAVAILABLE",
        status: 503,
      });
      dbProxy.restore(); // GET /metrics reads the database too
      const metrics = await (await fetch(`${cutOff.url}/metrics`)).text();
      const answered = (route: string) =>
        Number(
          new RegExp(`orbit_http_requests_total\\{route="${route}",status="503"\\} (\\d+)`).exec(metrics)?.[1] ?? 0,
        );
      assert.equal(answered("claimTask"), 1, "a claim answered 503 is not sent again");
      assert.equal(answered("completeAttempt"), 3, "a completion is (idempotent by its body)");
    } finally {
      await cutOff.stop();
      await dbProxy.close();
    }
  });

  it("claims and completes in batches: results kept exact, a lost completion answer recovered, a lost claim never re-sent", async () => {
    const b = cred.queues[2]!.id;
    const direct = new OrbitClient({ baseUrl: node.url, token: cred.token });
    for (let i = 0; i < 3; i++) await direct.submitTask(`sdk-batch-${i}`, { queue_id: b, input: i });
    const claimed = await orbit.claimTasks({ queue_id: b, max_tasks: 2, wait_ms: 1000 });
    assert.equal(claimed?.claims.length, 2);
    const [one, two] = claimed.claims;
    proxy.dropResponses(1);
    const before = proxy.dropped;
    const done = await orbit.completeAttempts({
      items: [
        { attempt_id: one!.attempt_id, outcome: "succeeded", result: new RawJson("[1.10, 98765432109876543210]") },
        { attempt_id: two!.attempt_id, outcome: "failed", error: "disk full" },
        { attempt_id: "0".repeat(32), outcome: "failed" },
      ],
    });
    assert.equal(proxy.dropped, before + 1, "the first answer was lost, and the batch sent again");
    const [a, f, missing] = done.items;
    assert.ok(a?.status === 200, JSON.stringify(a));
    assert.equal(a.task.result, "[1.10, 98765432109876543210]", "the raw text, exactly as written");
    assert.ok(f?.status === 200, JSON.stringify(f));
    assert.equal(f.task.state, "FAILED");
    assert.ok(missing && missing.status !== 200, JSON.stringify(missing));
    assert.deepEqual([missing.status, missing.error.code], [404, "NOT_FOUND"]);

    proxy.dropResponses(1);
    await assert.rejects(
      orbit.claimTasks({ queue_id: b, max_tasks: 32 }),
      (e: unknown) => e instanceof OrbitNetworkError,
    );
    assert.equal(
      await direct.claimTasks({ queue_id: b, max_tasks: 32 }),
      undefined,
      "the lost claim took the last task, and was not sent again",
    );
  });

  it("gives up with OrbitNetworkError when no answer ever comes", async () => {
    const dead = new OrbitClient({ baseUrl: "http://127.0.0.1:1", token: cred.token, retries: 1, backoffMs: 1 });
    await assert.rejects(
      dead.getSubscription("0123456789abcdef0123456789abcdef"),
      (e: unknown) => e instanceof OrbitNetworkError,
    );
  });
});

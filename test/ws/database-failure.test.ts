// The database goes away under a running node (a TCP proxy between node and MariaDB is
// cut): HTTP answers 503 UNAVAILABLE in the envelope, an event connection gets an
// UNAVAILABLE error frame and is closed (1013), the node does not crash, and once the
// database is back everything works again without any manual step.
import { strict as assert } from "node:assert";
import { freshDatabase, MYSQL_PORT, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client } from "../helpers/api.js";
import { assertError } from "../helpers/contract.js";
import { startProxy, type Proxy } from "../helpers/proxy.js";
import { cancelledResults, queueWithSubscription } from "../helpers/fixtures.js";
import { connect, mid, type TestSocket } from "../helpers/ws.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** How the connection closed, or undefined if it is still open after `ms`. */
const closedWithin = (s: TestSocket, ms: number) => Promise.race([s.closed, sleep(ms).then(() => undefined)]);

describe("when the database goes away", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let proxy: Proxy;
  let node: OrbitNode;
  let cred: BootstrapOutput;

  before(async () => {
    db = await freshDatabase("db_failure");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
    proxy = await startProxy(MYSQL_PORT);
    node = await startNode(db.urlVia(proxy), { ORBIT_REQUEST_TIMEOUT_MS: "3000" });
  });
  after(async () => {
    await node?.stop();
    await proxy?.close();
    await db?.drop();
  });

  it("answers UNAVAILABLE over HTTP and WebSocket, then recovers by itself", async () => {
    const api = client(node.url, cred.token);
    const sub = (await api.post("/v1/subscriptions", { name: "s", queue_id: cred.queues[0]!.id })).json.data
      .subscription.id;
    const s = await connect(node.url, { token: cred.token });
    await s.hello(sub, 1);
    const count = async () => {
      const c = await db.connect();
      try {
        const [[t]] = (await c.query(
          "SELECT (SELECT COUNT(*) FROM tasks) + (SELECT COUNT(*) FROM result_events) + (SELECT COUNT(*) FROM idempotency_keys) AS n",
        )) as any;
        return Number(t.n);
      } finally {
        await c.end();
      }
    };
    const rowsBefore = await count();
    proxy.cut();
    assertError(await api.get("/readyz"), 503, "UNAVAILABLE");
    const health = await api.get("/v1/health");
    assertError(health, 503, "UNAVAILABLE");
    assert.equal(health.headers["retry-after"], "1");
    // The metrics answer from memory: the database gauges were read in the background.
    const metrics = await api.get("/metrics");
    assert.equal(metrics.status, 200);
    assert.match(metrics.text, /^orbit_metrics_refresh_age_seconds /m);
    assertError(await api.get(`/v1/subscriptions/${sub}`), 503, "UNAVAILABLE");
    const write = await api.post("/v1/tasks", { queue_id: cred.queues[0]!.id, input: 1 });
    assertError(write, 503, "UNAVAILABLE");
    // The ping, or the connection's own background claim, finds the database gone first.
    s.send({
      protocol_version: "1",
      type: "events.ping",
      message_id: "ffffffffffffffffffffffffffffffff",
      session_id: s.sessionId,
      body: {},
    });
    const e = await s.nextOfType("error");
    assert.equal(e.error!.code, "UNAVAILABLE");
    assert.equal((await s.closed).code, 1013);
    for (const leak of ["ECONN", "PROTOCOL_", "mysql", "SELECT"])
      assert.ok(!JSON.stringify([health.json, write.json, e]).includes(leak));

    assert.equal(await count(), rowsBefore, "nothing half-written stays behind");
    proxy.restore();
    let ok = false;
    for (let i = 0; i < 50 && !ok; i++) {
      ok = (await api.get("/v1/health")).status === 200;
      if (!ok) await new Promise((r) => setTimeout(r, 200));
    }
    assert.ok(ok, "healthy again without a restart");
    const again = await connect(node.url, { token: cred.token });
    assert.equal((await again.hello(sub, 1)).type, "events.welcome");
    assert.equal((await again.ping()).type, "ack");
    again.close();
    const t = await api.post("/v1/tasks", { queue_id: cred.queues[0]!.id, input: 1 });
    assert.equal(t.status, 201, "writes work again");
    assert.equal(node.process.exitCode, null, "the node never crashed");
  });

  // A database connection that goes silent without closing (a failover, a lost NAT entry)
  // while the database goes on serving the node's other connections: the driver never
  // errors on it (mysql2 has no statement timeout), so whatever waits on it would wait for good.
  it("frees the application's claim slot when a claim's database connection goes silent", async () => {
    // docs/protocol.md §5: one claim in flight per application. Were the claim on the silent
    // connection to keep it, no consumer of the application on this node would receive
    // anything again.
    const api = client(node.url, cred.token);
    const { q, sub } = await queueWithSubscription(db, cred, api);
    const s = await connect(node.url, { token: cred.token });
    await s.hello(sub, 4);
    proxy.stallWhen("@orbit_namespace :=");
    try {
      const [task] = await cancelledResults(api, q, 1);
      const closed = await closedWithin(s, 16000);
      assert.ok(proxy.stalled, "a claim's connection went silent");
      assert.equal(closed?.code, 1013, "the claim ends UNAVAILABLE within the 10 s answer deadline");
      assert.equal(s.frames.find((f) => f.type === "error")?.error?.code, "UNAVAILABLE");
      const again = await connect(node.url, { token: cred.token });
      assert.equal((await again.hello(sub, 4)).type, "events.welcome");
      const d = await again.nextOfType("event.deliver", 5000);
      assert.equal(d.body.event.aggregate_id, task);
      assert.equal((await again.ack(d)).type, "ack");
      again.close();
    } finally {
      proxy.release();
    }
  });

  it("answers an ACK whose database connection goes silent, and the ACK sent again commits", async () => {
    // Unguarded, the ACK batch on the silent connection would never be answered: no receipt,
    // no error, and the connection open with its pings still answered (they use another pool).
    const api = client(node.url, cred.token);
    const { q, sub } = await queueWithSubscription(db, cred, api);
    const s = await connect(node.url, { token: cred.token });
    await s.hello(sub, 4);
    await cancelledResults(api, q, 1);
    const d = await s.nextOfType("event.deliver");
    proxy.stallWhen("lease_secret_digest, acknowledged_at");
    try {
      const id = mid();
      s.send({
        protocol_version: "1",
        type: "event.ack",
        message_id: id,
        session_id: s.sessionId,
        body: {
          delivery_id: d.body.delivery.id,
          epoch: d.body.delivery.lease_epoch,
          lease_secret: d.body.lease_secret,
        },
      });
      const reply = await s.next((f) => f.reply_to === id, 16000).catch((e: unknown) => String(e));
      assert.ok(proxy.stalled, "the ACK's connection went silent");
      assert.equal(
        typeof reply === "string" ? reply : reply.error?.code,
        "UNAVAILABLE",
        "the ACK is answered within the 10 s answer deadline",
      );
      assert.equal((await closedWithin(s, 2000))?.code, 1013);
      const again = await connect(node.url, { token: cred.token });
      await again.hello(sub, 4);
      const receipt = await again.ack(d);
      assert.equal(receipt.type, "ack");
      assert.equal(receipt.body.deduplicated, false, "the silent batch never committed");
      again.close();
    } finally {
      proxy.release();
    }
  });

  it("keeps one head poll at a time while the database stalls", async () => {
    // A head poll every 200 ms whether the last one had answered or not would queue ~20 of
    // them in a 4 s stall (5 a second for as long as it lasts) on the pool that HTTP
    // requests, pings and hellos wait for, ahead of them once the database answers again.
    const api = client(node.url, cred.token);
    const { sub } = await queueWithSubscription(db, cred, api);
    const s = await connect(node.url, { token: cred.token });
    await s.hello(sub, 1);
    await sleep(500);
    const polls = () =>
      node.lines.filter((l) => l.includes('"head poll failed"')).map((l) => Date.parse(JSON.parse(l).time as string));
    const before = polls().length;
    proxy.hold();
    await sleep(4000);
    proxy.cut();
    proxy.release();
    await sleep(500);
    proxy.restore();
    // The polls waiting when the connections were cut all fail together (one, not ~20);
    // one per 200 ms tick fails afterwards while the proxy refuses connections, the first of
    // which may fall within the 100 ms counted here.
    const failed = polls().slice(before);
    const together = failed.filter((t) => t - failed[0]! < 100).length;
    assert.ok(together <= 2, `${together} head polls were waiting when the connections were cut`);
    s.ws.terminate();
  });

  it("exits 0 within about 10 s of SIGTERM even when the database stops answering", async () => {
    // A node whose database answers nothing (a partition): its periodic jobs, a request and
    // the session close wait on statements that never return, and the shutdown must not wait
    // with them for good. docs/operations.md: "exits 0, within about 10 s and 11 s at most".
    const extra = await startNode(db.urlVia(proxy));
    const api = client(extra.url, cred.token);
    const sub = (await api.post("/v1/subscriptions", { name: "held", queue_id: cred.queues[0]!.id })).json.data
      .subscription.id;
    const s = await connect(extra.url, { token: cred.token });
    await s.hello(sub, 1);
    proxy.hold();
    try {
      const write = api.post("/v1/tasks", { queue_id: cred.queues[0]!.id, input: 1 }).catch(() => undefined);
      await new Promise((r) => setTimeout(r, 300));
      const started = Date.now();
      const exited = await Promise.race([
        extra.stop("SIGTERM"),
        new Promise((r) => setTimeout(() => r("still running after 20 s"), 20000)),
      ]);
      const took = Date.now() - started;
      assert.equal(exited, 0);
      assert.ok(took < 13500, `stopped after ${took} ms`);
      assert.ok([1001, 1013].includes((await s.closed).code), "the event connection is closed");
      const lines = extra.lines.map((l) => JSON.parse(l) as { msg: string });
      assert.ok(
        lines.some((l) => l.msg === "shutdown deadline passed: exiting"),
        "the log says work was left",
      );
      await write;
    } finally {
      extra.process.kill("SIGKILL");
      proxy.release();
    }
  });
});

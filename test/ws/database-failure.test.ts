// The database goes away under a running node (a TCP proxy between node and MariaDB is
// cut): HTTP answers 503 UNAVAILABLE in the envelope, an event connection gets an
// UNAVAILABLE error frame and is closed (1013), the node does not crash, and once the
// database is back everything works again without any manual step.
import { strict as assert } from "node:assert";
import { freshDatabase, MYSQL_SERVER, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client } from "../helpers/api.js";
import { assertContract, assertError } from "../helpers/contract.js";
import { startProxy, type Proxy } from "../helpers/proxy.js";
import { connect } from "../helpers/ws.js";

describe("when the database goes away", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let proxy: Proxy;
  let node: OrbitNode;
  let cred: BootstrapOutput;

  before(async () => {
    db = await freshDatabase("db_failure");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
    proxy = await startProxy(Number(new URL(MYSQL_SERVER).port || 3306));
    node = await startNode(`mysql://root@127.0.0.1:${proxy.port}/${db.name}`, { ORBIT_REQUEST_TIMEOUT_MS: "3000" });
  });
  after(async () => {
    await node?.stop();
    await proxy?.close();
    await db?.drop();
  });

  it("answers UNAVAILABLE over HTTP and WebSocket, then recovers by itself", async () => {
    const api = client(node.url, cred.token);
    const sub = (await api.post("/v1/subscriptions", { name: "s", queue_id: cred.queues[0]!.id })).json.data.subscription.id;
    const s = await connect(node.url, { token: cred.token });
    await s.hello(sub, 1);
    const count = async () => {
      const c = await db.connect();
      try {
        const [[t]] = (await c.query("SELECT (SELECT COUNT(*) FROM tasks) + (SELECT COUNT(*) FROM result_events) + (SELECT COUNT(*) FROM idempotency_keys) AS n")) as any;
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
    // The metrics read database gauges at scrape time: 503 too, as the contract lists.
    const metrics = await api.get("/metrics");
    assertError(metrics, 503, "UNAVAILABLE");
    assert.equal(metrics.headers["retry-after"], "1");
    assertContract("getMetrics", metrics);
    assertError(await api.get(`/v1/subscriptions/${sub}`), 503, "UNAVAILABLE");
    const write = await api.post("/v1/tasks", { queue_id: cred.queues[0]!.id, input: 1 });
    assertError(write, 503, "UNAVAILABLE");
    // The ping, or the connection's own background claim, finds the database gone first.
    s.send({ protocol_version: "1", type: "events.ping", message_id: "ffffffffffffffffffffffffffffffff", session_id: s.sessionId, body: {} });
    const e = await s.nextOfType("error");
    assert.equal(e.error!.code, "UNAVAILABLE");
    assert.equal((await s.closed).code, 1013);
    for (const leak of ["ECONN", "PROTOCOL_", "mysql", "SELECT"]) assert.ok(!JSON.stringify([health.json, write.json, e]).includes(leak));

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

  it("exits 0 within about 10 s of SIGTERM even when the database stops answering", async () => {
    // A node whose database answers nothing (a partition): its periodic jobs, a request and
    // the session close wait on statements that never return, and the shutdown waited with
    // them for good. README: "exits 0 within about 10 s" (11 s at most).
    const extra = await startNode(`mysql://root@127.0.0.1:${proxy.port}/${db.name}`);
    const api = client(extra.url, cred.token);
    const sub = (await api.post("/v1/subscriptions", { name: "held", queue_id: cred.queues[0]!.id })).json.data.subscription.id;
    const s = await connect(extra.url, { token: cred.token });
    await s.hello(sub, 1);
    proxy.hold();
    try {
      const write = api.post("/v1/tasks", { queue_id: cred.queues[0]!.id, input: 1 }).catch(() => undefined);
      await new Promise((r) => setTimeout(r, 300));
      const started = Date.now();
      const exited = await Promise.race([extra.stop("SIGTERM"), new Promise((r) => setTimeout(() => r("still running after 20 s"), 20000))]);
      const took = Date.now() - started;
      assert.equal(exited, 0);
      assert.ok(took < 13500, `stopped after ${took} ms`);
      assert.ok([1001, 1013].includes((await s.closed).code), "the event connection is closed");
      const lines = extra.lines.map((l) => JSON.parse(l) as { msg: string });
      assert.ok(lines.some((l) => l.msg === "shutdown deadline passed: exiting"), "the log says work was left");
      await write;
    } finally {
      extra.process.kill("SIGKILL");
      proxy.release();
    }
  });
});

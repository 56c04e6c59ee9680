// A consumer that stops reading (docs/protocol.md §5, §7): once a write has waited 5 s the node
// terminates that connection; other connections are served meanwhile, and the leases
// it held stay in the database for recovery.
import { strict as assert } from "node:assert";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client } from "../helpers/api.js";
import { connect, type TestSocket } from "../helpers/ws.js";

describe("a consumer that stops reading", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  const open: TestSocket[] = [];

  before(async () => {
    db = await freshDatabase("ws_slow");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q", "other"], eventAccess: true });
    node = await startNode(db.url);
  });
  after(async () => {
    for (const s of open) s.ws.terminate();
    await node?.stop();
    await db?.drop();
  });

  it("is terminated after the 5 s write timeout without stalling other connections", async () => {
    const api = client(node.url, cred.token);
    const q = cred.queues[0]!.id;
    const sub = (await api.post("/v1/subscriptions", { name: "slow", queue_id: q })).json.data.subscription.id;
    const otherSub = (await api.post("/v1/subscriptions", { name: "other", queue_id: cred.queues[1]!.id })).json.data
      .subscription.id;
    // 32 results of ~240 KiB (under the 256 KiB result limit): far more than the socket
    // buffers hold.
    const big = JSON.stringify({ blob: "x".repeat(240 * 1024) });
    for (let i = 0; i < 32; i++) {
      await api.post("/v1/tasks", { queue_id: q, input: i });
      const c = (await api.post("/v1/worker/claim", { queue_id: q }, null)).json.data;
      const done = await api.post(
        `/v1/worker/attempts/${c.attempt_id}:complete`,
        `{"outcome":"succeeded","result":${big}}`,
        null,
      );
      assert.equal(done.status, 200, done.text.slice(0, 200));
    }
    const healthy = await connect(node.url, { token: cred.token });
    open.push(healthy);
    await healthy.hello(otherSub, 1);
    const slow = await connect(node.url, { token: cred.token });
    open.push(slow);
    await slow.hello(sub, 32);
    (slow.ws as unknown as { _socket: { pause(): void } })._socket.pause(); // stop reading
    const started = Date.now();
    let pings = 0;
    // The paused client cannot see the close; the node's log and session row show it.
    const terminated = () => node.lines.some((l) => l.includes("write timeout") && l.includes(slow.sessionId));
    while (!terminated() && Date.now() - started < 15000) {
      assert.equal((await healthy.ping()).type, "ack", "the other connection is answered meanwhile");
      pings++;
      await new Promise((r) => setTimeout(r, 250));
    }
    const after = Date.now() - started;
    assert.ok(terminated(), "the slow connection was terminated");
    assert.ok(after >= 4500, `not before the 5 s write timeout (${after} ms)`);
    assert.ok(pings >= 5, `the healthy connection kept working (${pings} pings)`);
    const c = await db.connect();
    try {
      const [rows] = await c.query<any[]>(
        "SELECT COUNT(*) AS n FROM deliveries WHERE subscription_id = ? AND state = 'LEASED'",
        [sub],
      );
      assert.ok(Number(rows[0].n) > 0, "its leases stay for recovery");
    } finally {
      await c.end();
    }
  });
});

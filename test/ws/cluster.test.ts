// Two (then three) `orbit serve` nodes on one database, consumers spread over them on one
// subscription, 500 (300) results: every delivery ends ACKED exactly once, no connection ever
// holds more than its capacity (checked in the database while it runs, and by each
// consumer), and every event reaches the consumers at least once.
import { strict as assert } from "node:assert";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client } from "../helpers/api.js";
import { connect, type Frame, type TestSocket } from "../helpers/ws.js";

for (const [NODES, RESULTS, CAPACITIES] of [
  [2, 500, [4, 2, 8]],
  [3, 300, [3, 5, 1, 8, 2, 4]],
] as const) {
  describe(`a cluster of ${NODES} nodes with ${CAPACITIES.length} consumers spread over them`, function () {
    this.timeout(180000);
    let db: TestDatabase;
    let nodes: OrbitNode[];
    let cred: BootstrapOutput;
    const sockets: TestSocket[] = [];

    before(async () => {
      db = await freshDatabase(`ws_cluster_${NODES}`);
      cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
      nodes = await Promise.all(Array.from({ length: NODES }, () => startNode(db.url)));
    });
    after(async () => {
      for (const s of sockets) s.ws.terminate();
      await Promise.all((nodes ?? []).map((n) => n.stop()));
      await db?.drop();
    });

    it(`delivers all ${RESULTS} results, ACKed exactly once each, within every capacity`, async () => {
      const q = cred.queues[0]!.id;
      const api = client(nodes[0]!.url, cred.token);
      const sub = (await api.post("/v1/subscriptions", { name: "all", queue_id: q, max_pending: 200 })).json.data
        .subscription.id;
      const received = new Map<string, number>(); // event id → times received
      let overCapacity = 0;
      let acked = 0;
      const done = new Promise<void>((resolve) => {
        CAPACITIES.forEach(async (capacity, i) => {
          const s = await connect(nodes[i % NODES]!.url, { token: cred.token });
          sockets.push(s);
          let outstanding = 0;
          s.ws.on("message", (data) => {
            const f = JSON.parse(data.toString()) as Frame;
            // Counted as frames arrive, in order: an ACK's reply precedes the next delivery.
            if (f.type === "ack" && f.body.delivery_id) outstanding--;
            if (f.type !== "event.deliver") return;
            outstanding++;
            if (outstanding > capacity) overCapacity++;
            received.set(f.body.event.id, (received.get(f.body.event.id) ?? 0) + 1);
            setTimeout(async () => {
              const a = await s.ack(f);
              assert.equal(a.type, "ack", JSON.stringify(a));
              if (!a.body.deduplicated) acked++;
              if (acked === RESULTS) resolve();
            }, Math.random() * 5);
          });
          await s.hello(sub, capacity);
        });
      });

      // Meanwhile, sample the database: LEASED per session never exceeds its capacity.
      let sampling = true;
      let samples = 0;
      let dbViolations = 0;
      const sampler = (async () => {
        const c = await db.connect();
        try {
          while (sampling) {
            const [rows] = await c.query<any[]>(
              `SELECT s.capacity, COUNT(*) AS held FROM deliveries d JOIN event_sessions s ON s.id = d.session_id
              WHERE d.state = 'LEASED' GROUP BY d.session_id, s.capacity`,
            );
            for (const r of rows) if (Number(r.held) > Number(r.capacity)) dbViolations++;
            samples++;
            await new Promise((r) => setTimeout(r, 20));
          }
        } finally {
          await c.end();
        }
      })();

      // Producers on both nodes.
      let next = 0;
      await Promise.all(
        Array.from({ length: 8 }, async (_, w) => {
          const p = client(nodes[w % NODES]!.url, cred.token);
          while (next < RESULTS) {
            next++;
            const t = (await p.post("/v1/tasks", { queue_id: q, input: next })).json.data.task;
            const res = await p.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" });
            assert.equal(res.status, 200);
          }
        }),
      );
      await done;
      sampling = false;
      await sampler;

      assert.equal(overCapacity, 0, "no consumer ever held more than its capacity");
      assert.equal(dbViolations, 0, `no session held more LEASED deliveries than its capacity (${samples} samples)`);
      assert.ok(samples > 10);
      assert.equal(received.size, RESULTS, "every event reached a consumer");
      const c = await db.connect();
      try {
        const [states] = await c.query<any[]>(
          "SELECT state, COUNT(*) AS n FROM deliveries WHERE subscription_id = ? GROUP BY state",
          [sub],
        );
        assert.deepEqual(
          states.map((r) => [r.state, Number(r.n)]),
          [["ACKED", RESULTS]],
        );
        const [audits] = await c.query<any[]>(
          "SELECT COUNT(*) AS n, COUNT(DISTINCT delivery_id) AS d FROM audit_records WHERE subscription_id = ? AND action = 'delivery.ack'",
          [sub],
        );
        assert.deepEqual([Number(audits[0].n), Number(audits[0].d)], [RESULTS, RESULTS], "one ACK audit per delivery");
        const [perEvent] = await c.query<any[]>(
          "SELECT COUNT(*) AS n FROM deliveries WHERE subscription_id = ? GROUP BY event_id HAVING n > 1",
          [sub],
        );
        assert.equal(perEvent.length, 0, "one delivery per (subscription, event)");
      } finally {
        await c.end();
      }
      const perConsumer = sockets.map((s) => s.frames.filter((f) => f.type === "event.deliver").length);
      const perNode = nodes.map((_, n) => perConsumer.filter((_, i) => i % NODES === n).reduce((a, b) => a + b, 0));
      assert.ok(
        perNode.every((x) => x > 0),
        `consumers on every node took part: ${perNode}`,
      );
    });
  });
}

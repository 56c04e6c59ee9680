// Faults of nodes, nothing lost: consumers (the SDK's Consumer,
// given every node's address) keep receiving and ACKing while (a) one node is SIGKILLed
// and (d) every node is restarted mid-stream. Afterwards every result has exactly one
// ACKED delivery per subscription, and no ACK audit record is duplicated.
import { strict as assert } from "node:assert";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, type Client } from "../helpers/api.js";
import { Consumer } from "../../src/sdk/index.js";
import { freePort } from "../helpers/ports.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("node faults", function () {
  this.timeout(240000);
  let db: TestDatabase;
  let cred: BootstrapOutput;
  const consumers: Consumer[] = [];
  const nodes: OrbitNode[] = [];
  const env = { ORBIT_LEASE_DURATION_MS: "1000" };

  before(async () => {
    db = await freshDatabase("faults_nodes");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["a", "b"], eventAccess: true });
  });
  afterEach(async () => {
    await Promise.all(consumers.splice(0).map((c) => c.stop({ deadlineMs: 500 })));
    await Promise.all(nodes.splice(0).map((n) => n.stop("SIGKILL")));
  });
  after(async () => {
    await db?.drop();
  });

  /** Two subscriptions on a queue, two consumers each, every consumer knowing every node. */
  async function consume(api: Client, queueId: string, urls: string[], tag: string) {
    const subs: string[] = [];
    const seen = new Map<string, number>();
    for (const name of [`${tag}-1`, `${tag}-2`]) {
      const sub = (await api.post("/v1/subscriptions", { name, queue_id: queueId })).json.data.subscription
        .id as string;
      subs.push(sub);
      for (let i = 0; i < 2; i++) {
        consumers.push(
          new Consumer({
            baseUrl: i === 0 ? urls : [...urls].reverse(),
            token: cred.token,
            subscriptionId: sub,
            capacity: 4,
            backoff: { initialMs: 50, maxMs: 500 },
            handler: async (event) => {
              seen.set(`${sub}/${event.id}`, (seen.get(`${sub}/${event.id}`) ?? 0) + 1);
            },
          }).start(),
        );
      }
    }
    return { subs, seen };
  }

  /** Produces results through whichever node answers, retrying until each one lands. */
  async function produce(urls: () => string[], queueId: string, n: number, onProgress?: (i: number) => Promise<void>) {
    for (let i = 0; i < n; i++) {
      for (let attempt = 0; ; attempt++) {
        const url = urls()[attempt % urls().length]!;
        try {
          const api = client(url, cred.token);
          const key = `result-${queueId}-${i}`;
          const t = await api.post("/v1/tasks", { queue_id: queueId, input: i }, key);
          if (t.status !== 201 && t.status !== 200) throw new Error(t.text);
          const task = t.json.data.task;
          if (task.state === "QUEUED") {
            const c = await api.post(
              `/v1/tasks/${task.id}:cancel`,
              { expected_revision: "1", reason: "r" },
              `${key}-cancel`,
            );
            if (c.status !== 200) throw new Error(c.text);
          }
          break;
        } catch {
          assert.ok(attempt < 200, "a node kept answering");
          await sleep(50);
        }
      }
      await onProgress?.(i);
    }
  }

  async function expectAllAcked(subs: string[], results: number) {
    const c = await db.connect();
    try {
      for (const end = Date.now() + 60000; ;) {
        const [rows] = await c.query<any[]>(
          "SELECT subscription_id, SUM(state = 'ACKED') AS acked, COUNT(*) AS n FROM deliveries WHERE subscription_id IN (?) GROUP BY subscription_id",
          [subs],
        );
        const done =
          rows.length === subs.length && rows.every((r) => Number(r.acked) === results && Number(r.n) === results);
        if (done) break;
        assert.ok(Date.now() < end, `not all ACKED: ${JSON.stringify(rows)}`);
        await sleep(200);
      }
      const [dups] = await c.query<any[]>(
        "SELECT delivery_id, COUNT(*) AS n FROM audit_records WHERE subscription_id IN (?) AND action = 'delivery.ack' GROUP BY delivery_id HAVING n > 1",
        [subs],
      );
      assert.deepEqual(dups, [], "no ACK audit record is duplicated");
      const [[audits]] = (await c.query(
        "SELECT COUNT(*) AS n FROM audit_records WHERE subscription_id IN (?) AND action = 'delivery.ack'",
        [subs],
      )) as any;
      assert.equal(Number(audits.n), results * subs.length);
    } finally {
      await c.end();
    }
  }

  it("(a) loses nothing when a node is SIGKILLed while consumers receive and ACK", async () => {
    const [a, b] = await Promise.all([startNode(db.url, env), startNode(db.url, env)]);
    nodes.push(a!, b!);
    const q = cred.queues[0]!.id;
    const { subs, seen } = await consume(client(b!.url, cred.token), q, [a!.url, b!.url], "kill");
    await sleep(300);
    let killed = false;
    await produce(
      () => (killed ? [b!.url] : [a!.url, b!.url]),
      q,
      200,
      async (i) => {
        if (i === 80) {
          await a!.stop("SIGKILL");
          killed = true;
        }
      },
    );
    await expectAllAcked(subs, 200);
    const perSub = subs.map((s) => [...seen.keys()].filter((k) => k.startsWith(s)).length);
    assert.deepEqual(perSub, [200, 200], "every event reached each subscription's consumers at least once");
  });

  it("(d) loses nothing when every node is restarted mid-stream", async () => {
    const ports = [await freePort(), await freePort()];
    const start = (p: number) => startNode(db.url, { ...env, ORBIT_PORT: String(p) });
    let current = await Promise.all(ports.map(start));
    nodes.push(...current);
    const urls = ports.map((p) => `http://127.0.0.1:${p}`);
    const q = cred.queues[1]!.id;
    const { subs } = await consume(client(urls[0]!, cred.token), q, urls, "restart");
    await sleep(300);
    await produce(
      () => urls,
      q,
      150,
      async (i) => {
        if (i === 60) {
          // Every node goes (SIGTERM: 1001 to consumers, leases kept), then comes back.
          await Promise.all(current.map((n) => n.stop("SIGTERM")));
          current = await Promise.all(ports.map(start));
          nodes.push(...current);
        }
      },
    );
    await expectAllAcked(subs, 150);
  });
});

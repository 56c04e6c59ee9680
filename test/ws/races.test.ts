// Races a real deployment sees, on two `orbit serve` nodes sharing one database: the same
// ACK proof sent at once on several connections of both nodes; pause and resume commands
// racing consumers and producers on both nodes; manual retries racing late ACKs of the
// previous proof and a consumer that claims the retried deliveries. Each test checks the
// end state from the database and the API (docs/protocol.md §3, §4, §6), not timings: one
// counted ACK and one audit record per delivery, the backlog decremented once, no claim or
// materialisation after a pause was answered, the revision one per configure command.
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, runCli, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, waitSequenced, type Client } from "../helpers/api.js";
import { cancelledResults, queueWithSubscription } from "../helpers/fixtures.js";
import { connect, refusal, type Frame, type TestSocket } from "../helpers/ws.js";

const LEASE_MS = 800;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const randomHex = () => randomBytes(16).toString("hex");

describe("races on two nodes", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let nodes: OrbitNode[];
  let cred: BootstrapOutput;
  let apis: Client[];
  const open: TestSocket[] = [];

  async function consumer(node: number, sub: string, capacity: number): Promise<TestSocket> {
    const s = await connect(nodes[node]!.url, { token: cred.token });
    open.push(s);
    const w = await s.hello(sub, capacity);
    assert.equal(w.type, "events.welcome", JSON.stringify(w));
    return s;
  }
  const delivered = (s: TestSocket) => s.frames.filter((f) => f.type === "event.deliver");
  async function until(what: string, cond: () => Promise<boolean>, timeoutMs = 20000): Promise<void> {
    const end = Date.now() + timeoutMs;
    while (!(await cond())) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await sleep(50);
    }
  }
  async function states(sub: string): Promise<Record<string, number>> {
    const rows = await db.query(
      "SELECT state, COUNT(*) AS n FROM deliveries WHERE subscription_id = ? GROUP BY state",
      [sub],
    );
    return Object.fromEntries(rows.map((r) => [r.state, Number(r.n)]));
  }
  /** What pause must freeze: how many deliveries exist, every lease ever granted, the cursor. */
  async function claimFootprint(sub: string): Promise<string> {
    const [d] = await db.query(
      "SELECT COUNT(*) AS n, COALESCE(SUM(lease_epoch), 0) AS epochs, COALESCE(SUM(attempts), 0) AS attempts FROM deliveries WHERE subscription_id = ?",
      [sub],
    );
    const [s] = await db.query("SELECT cursor_sequence FROM subscriptions WHERE id = ?", [sub]);
    return `${d.n} deliveries, ${d.epochs} epochs, ${d.attempts} attempts, cursor ${s.cursor_sequence}`;
  }
  async function ackAudits(sub: string): Promise<Map<string, any[]>> {
    const rows = await db.query(
      "SELECT delivery_id, details FROM audit_records WHERE subscription_id = ? AND action = 'delivery.ack'",
      [sub],
    );
    const m = new Map<string, any[]>();
    for (const r of rows) m.set(r.delivery_id, [...(m.get(r.delivery_id) ?? []), JSON.parse(r.details)]);
    return m;
  }

  before(async () => {
    db = await freshDatabase("ws_races");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["base"], eventAccess: true });
    nodes = await Promise.all([0, 1].map(() => startNode(db.url, { ORBIT_LEASE_DURATION_MS: String(LEASE_MS) })));
    apis = nodes.map((n) => client(n.url, cred.token));
  });
  afterEach(async () => {
    const all = open.splice(0);
    for (const s of all) s.ws.terminate();
    await Promise.all(all.map((s) => s.closed));
  });
  after(async () => {
    await Promise.all((nodes ?? []).map((n) => n.stop()));
    await db?.drop();
  });

  it("counts one of many simultaneous ACKs of one proof on connections of both nodes: one audit, the backlog down once", async () => {
    const N = 6;
    const { q, sub } = await queueWithSubscription(db, cred, apis[0]!);
    await cancelledResults(apis[0]!, q, N);
    const holder = await consumer(0, sub, N);
    const got: Frame[] = [];
    for (let i = 0; i < N; i++) got.push(await holder.nextOfType("event.deliver"));
    // Four more connections, two on each node, with nothing left to claim: they only ACK.
    const others = await Promise.all([0, 1, 0, 1].map((n) => consumer(n, sub, 1)));
    const all = [holder, ...others];
    // Every proof three times on each connection, with a stale one (epoch 0) in the mix, all at once.
    const replies = await Promise.all(
      got.flatMap((d) => [
        ...all.flatMap((s) => [s.ack(d), s.ack(d), s.ack(d)]),
        others[0]!.ack({ delivery_id: d.body.delivery.id, epoch: "0", lease_secret: d.body.lease_secret }),
      ]),
    );
    const per = new Map<string, Frame[]>();
    for (const r of replies) {
      const id = r.body?.delivery_id ?? r.error?.code;
      per.set(id, [...(per.get(id) ?? []), r]);
    }
    assert.equal(per.get("DELIVERY_LEASE_LOST")?.length, N, "each stale proof is DELIVERY_LEASE_LOST");
    for (const d of got) {
      const rs = per.get(d.body.delivery.id)!;
      assert.equal(rs.length, all.length * 3);
      assert.ok(
        rs.every((r) => r.type === "ack"),
        JSON.stringify(rs.filter((r) => r.type !== "ack")),
      );
      assert.equal(rs.filter((r) => !r.body.deduplicated).length, 1, "exactly one ACK counts");
      assert.equal(
        new Set(rs.map((r) => r.body.acknowledged_at)).size,
        1,
        "every reply carries the one acknowledged_at",
      );
    }
    const audits = await ackAudits(sub);
    assert.equal(audits.size, N);
    assert.ok(
      [...audits.values()].every((a) => a.length === 1),
      "one ACK audit record per delivery",
    );
    assert.deepEqual(await states(sub), { ACKED: N });
    const rows = await db.query("SELECT revision, acknowledged_at FROM deliveries WHERE subscription_id = ?", [sub]);
    assert.ok(
      rows.every((r) => String(r.revision) === "3"),
      "created, leased, ACKED: nothing more moved the revision",
    );
    const s = (await apis[1]!.get(`/v1/subscriptions/${sub}`)).json.data;
    assert.equal(s.pending_count, 0);
    assert.equal(s.revision, "1", "ACKs never move the configuration revision");
  });

  it("claims and materialises nothing once a pause is answered, while consumers and producers on both nodes race it", async () => {
    const RESULTS = 120;
    const TOGGLES = 4; // pause + resume pairs
    const { q, sub } = await queueWithSubscription(db, cred, apis[0]!, { max_pending: 40 });
    const received = new Map<string, number>();
    let acked = 0;
    let stop = false;
    const consumers = await Promise.all([4, 2, 3, 1].map((cap, i) => consumer(i % 2, sub, cap)));
    for (const s of consumers) {
      s.ws.on("message", (data) => {
        const f = JSON.parse(data.toString()) as Frame;
        if (f.type !== "event.deliver") return;
        received.set(f.body.event.aggregate_id, (received.get(f.body.event.aggregate_id) ?? 0) + 1);
        setTimeout(async () => {
          const a = await s.ack(f);
          assert.equal(a.type, "ack", JSON.stringify(a));
          if (!a.body.deduplicated) acked++;
        }, Math.random() * 20);
      });
    }
    // Pings wake the connections of the node where a command was not made.
    const pinger = (async () => {
      while (!stop) {
        await Promise.all(consumers.map((s) => s.ping()));
        await sleep(100);
      }
    })();
    const tasks: string[] = [];
    let started = 0;
    const producers = Promise.all(
      [0, 1, 0, 1].map(async (n) => {
        while (started < RESULTS) {
          started++;
          tasks.push(...(await cancelledResults(apis[n]!, q, 1)));
          await sleep(Math.random() * 10);
        }
      }),
    );
    let commands = 0;
    for (let i = 0; i < TOGGLES; i++) {
      await sleep(150 + Math.random() * 150);
      const cur = (await apis[i % 2]!.get(`/v1/subscriptions/${sub}`)).json.data;
      // Two pauses with the same expected revision from both nodes at once: exactly one wins.
      const both = await Promise.all(
        apis.map((a) =>
          a.post(`/v1/subscriptions/${sub}:configure`, {
            expected_revision: cur.revision,
            enabled: false,
            reason: "race",
          }),
        ),
      );
      assert.deepEqual(both.map((r) => r.status).sort(), [200, 409], both.map((r) => r.text).join("\n"));
      assert.equal(both.find((r) => r.status === 409)!.json.error.code, "STATE_CONFLICT");
      const paused = both.find((r) => r.status === 200)!.json.data.subscription;
      commands++;
      assert.equal(paused.revision, String(BigInt(cur.revision) + 1n));
      // From the answer on: no lease, no new delivery, no cursor move, while consumers ACK and ping.
      const frozen = await claimFootprint(sub);
      const [backlog] = await db.query(
        "SELECT COUNT(*) AS n FROM deliveries WHERE subscription_id = ? AND state <> 'ACKED'",
        [sub],
      );
      assert.ok(Number(backlog.n) <= 40, `the backlog within max_pending: ${backlog.n}`);
      await sleep(400);
      assert.equal(await claimFootprint(sub), frozen, `paused at revision ${paused.revision}`);
      const resumed = await apis[(i + 1) % 2]!.post(`/v1/subscriptions/${sub}:configure`, {
        expected_revision: paused.revision,
        enabled: true,
        reason: "race",
      });
      assert.equal(resumed.status, 200, resumed.text);
      commands++;
    }
    await producers;
    await until("every result ACKed", async () => acked >= tasks.length);
    stop = true;
    await pinger;

    assert.equal(tasks.length, RESULTS);
    assert.deepEqual([...tasks].sort(), [...received.keys()].sort(), "every result reached a consumer");
    assert.deepEqual(await states(sub), { ACKED: RESULTS });
    const audits = await ackAudits(sub);
    assert.ok(
      audits.size === RESULTS && [...audits.values()].every((a) => a.length === 1),
      "one ACK audit per delivery",
    );
    const s = (await apis[0]!.get(`/v1/subscriptions/${sub}`)).json.data;
    assert.equal(s.pending_count, 0);
    assert.equal(s.enabled, true);
    assert.equal(s.revision, String(1 + commands), "one revision per configure command, none from claims or ACKs");
    const configures = await db.query(
      "SELECT COUNT(*) AS n FROM audit_records WHERE subscription_id = ? AND action LIKE 'subscription.configure%'",
      [sub],
    );
    assert.equal(Number(configures[0].n), commands, "one audit per configure command, the refused ones none");
    await waitSequenced(db, cred.namespace_id);
    const dup = await db.query(
      "SELECT event_id FROM deliveries WHERE subscription_id = ? GROUP BY event_id HAVING COUNT(*) > 1",
      [sub],
    );
    assert.equal(dup.length, 0, "one delivery per event");
  });

  it("lets exactly one ACK count when manual retries race late ACKs of the old proof and a claiming consumer", async () => {
    const N = 12;
    const { q, sub } = await queueWithSubscription(db, cred, apis[0]!, { max_attempts: 1 });
    await cancelledResults(apis[0]!, q, N);
    // First holder takes all N and never ACKs; its proofs are the "old" ones.
    const first = await consumer(0, sub, N);
    const old: Frame[] = [];
    for (let i = 0; i < N; i++) old.push(await first.nextOfType("event.deliver"));
    first.ws.terminate();
    await first.closed;
    await sleep(LEASE_MS + 100);
    // A claim recovers the run-out leases: the budget (1) is used, so they are EXPIRED.
    const waker = await consumer(1, sub, 1);
    await until("all EXPIRED", async () => (await states(sub)).EXPIRED === N);
    waker.ws.terminate();
    await waker.closed;
    const before = await db.query("SELECT id, revision FROM deliveries WHERE subscription_id = ?", [sub]);

    // Now all at once: a retry of each (node 1), the old proof's late ACK (node 0), and a
    // consumer on node 1 that claims what the retries make PENDING and ACKs it. The
    // connection that sends the late ACKs is a consumer of the subscription too: it is sent
    // retried deliveries as well, and ACKs them (left unACKed, one sent to it twice would use
    // up its budget and stay EXPIRED).
    const late = await consumer(0, sub, 1);
    const claimer = await consumer(1, sub, 4);
    const claimerAcks: Frame[] = [];
    for (const s of [late, claimer]) {
      s.ws.on("message", (data) => {
        const f = JSON.parse(data.toString()) as Frame;
        if (f.type === "event.deliver") void s.ack(f).then((a) => claimerAcks.push(a));
      });
    }
    const [retries, lateAcks] = await Promise.all([
      Promise.all(
        before.map((d) =>
          apis[1]!.post(`/v1/subscriptions/${sub}/deliveries/${d.id}:retry`, {
            expected_revision: String(d.revision),
            reason: "race",
            additional_attempts: 2,
          }),
        ),
      ),
      Promise.all(
        old.map(async (d) => {
          await sleep(Math.random() * 30);
          return late.ack(d);
        }),
      ),
    ]);
    await until("all ACKED", async () => (await states(sub)).ACKED === N);
    await until(
      "the claimers' ACK replies",
      async () => claimerAcks.length === delivered(claimer).length + delivered(late).length,
    );

    for (const r of retries) {
      assert.ok(r.status === 200 || (r.status === 409 && r.json.error.code === "STATE_CONFLICT"), r.text);
    }
    const audits = await ackAudits(sub);
    const rows = await db.query(
      "SELECT id, lease_epoch, attempt_budget, attempts FROM deliveries WHERE subscription_id = ?",
      [sub],
    );
    for (const row of rows) {
      const id = row.id as string;
      const lateCounted = lateAcks.some((a) => a.type === "ack" && a.body.delivery_id === id && !a.body.deduplicated);
      const claimerCounted = claimerAcks.find(
        (a) => a.type === "ack" && a.body.delivery_id === id && !a.body.deduplicated,
      );
      assert.equal(Number(lateCounted) + Number(claimerCounted !== undefined), 1, `exactly one counted ACK of ${id}`);
      assert.equal(audits.get(id)?.length, 1, `one ACK audit of ${id}`);
      if (lateCounted) {
        assert.ok(
          ![...delivered(claimer), ...delivered(late)].some((f) => f.body.delivery.id === id),
          "an ACK of the old proof means no newer epoch was sent",
        );
        assert.equal(audits.get(id)![0].epoch, "1");
      } else {
        assert.notEqual(claimerCounted!.body.epoch, "1", "a newer epoch");
        assert.equal(audits.get(id)![0].epoch, claimerCounted!.body.epoch, "the claimer's epoch");
      }
      const retried = retries.some((r) => r.status === 200 && r.json.data.delivery.id === id);
      assert.equal(row.attempt_budget, retried ? 3 : 1, "a budget only from a retry that was answered 200");
      if (claimerCounted) assert.ok(retried, "only a retried delivery is claimed again");
    }
    const retryAudits = await db.query(
      "SELECT COUNT(*) AS n FROM audit_records WHERE subscription_id = ? AND action = 'delivery.retry'",
      [sub],
    );
    assert.equal(
      Number(retryAudits[0].n),
      retries.filter((r) => r.status === 200).length,
      "one audit per answered retry",
    );
    const lost = lateAcks.filter((a) => a.type === "error");
    assert.ok(
      lost.every((a) => a.error!.code === "DELIVERY_LEASE_LOST"),
      JSON.stringify(lost),
    );
    assert.equal((await apis[0]!.get(`/v1/subscriptions/${sub}`)).json.data.pending_count, 0);
  });

  it("runs a management write once when its Idempotency-Key is raced on both nodes; the losers replay its receipt", async () => {
    const { q, sub } = await queueWithSubscription(db, cred, apis[0]!, { max_attempts: 1 });
    const race = (path: string, body: unknown, key: string, n = 6) =>
      Promise.all(Array.from({ length: n }, (_, i) => apis[i % 2]!.post(path, body, key)));
    const once = (answers: { status: number; text: string; json: any }[], created = 200) => {
      const fresh = answers.filter((a) => a.json?.data?.deduplicated === false);
      assert.equal(fresh.length, 1, answers.map((a) => a.text).join("\n"));
      assert.equal(fresh[0]!.status, created);
      for (const a of answers.filter((x) => x !== fresh[0])) {
        assert.equal(a.status, 200, a.text);
        assert.equal(a.json.data.deduplicated, true);
        assert.deepEqual({ ...a.json.data, deduplicated: false }, fresh[0]!.json.data, "the original receipt");
      }
    };
    // configure: one revision bump, one audit.
    const cur = (await apis[0]!.get(`/v1/subscriptions/${sub}`)).json.data;
    once(
      await race(
        `/v1/subscriptions/${sub}:configure`,
        { expected_revision: cur.revision, enabled: false, reason: "race" },
        "cfg-1",
      ),
    );
    // The same key, other content, raced: none of it runs, each is IDEMPOTENCY_CONFLICT.
    for (const a of await race(
      `/v1/subscriptions/${sub}:configure`,
      { expected_revision: cur.revision, enabled: true, reason: "race" },
      "cfg-1",
    )) {
      assert.equal(a.status, 409, a.text);
      assert.equal(a.json.error.code, "IDEMPOTENCY_CONFLICT");
    }
    // A raced key whose write fails (a stale revision) stores nothing: every copy is STATE_CONFLICT, none a replay.
    for (const a of await race(
      `/v1/subscriptions/${sub}:configure`,
      { expected_revision: cur.revision, enabled: true, reason: "stale" },
      "cfg-2",
      8,
    )) {
      assert.equal(a.status, 409, a.text);
      assert.equal(a.json.error.code, "STATE_CONFLICT");
    }
    const after = (await apis[1]!.get(`/v1/subscriptions/${sub}`)).json.data;
    assert.equal(after.revision, String(BigInt(cur.revision) + 1n), "one configure ran");
    assert.equal(after.enabled, false);
    const cfg = await db.query(
      "SELECT COUNT(*) AS n FROM audit_records WHERE subscription_id = ? AND action = 'subscription.configure'",
      [sub],
    );
    assert.equal(Number(cfg[0].n), 1);
    // The failed key is free: used again with the right revision, it runs.
    const resumed = await apis[0]!.post(
      `/v1/subscriptions/${sub}:configure`,
      { expected_revision: after.revision, enabled: true, reason: "stale" },
      "cfg-2",
    );
    assert.equal(resumed.status, 200, resumed.text);
    assert.equal(resumed.json.data.deduplicated, false);

    // retry of an EXPIRED delivery: one budget increase, one audit.
    await cancelledResults(apis[0]!, q, 1);
    const s = await consumer(0, sub, 1);
    const d = await s.nextOfType("event.deliver");
    await sleep(LEASE_MS + 100);
    await s.ping();
    await until("EXPIRED", async () => (await states(sub)).EXPIRED === 1);
    const row = (await apis[0]!.get(`/v1/subscriptions/${sub}/deliveries/${d.body.delivery.id}`)).json.data.delivery;
    once(
      await race(
        `/v1/subscriptions/${sub}/deliveries/${row.id}:retry`,
        { expected_revision: row.revision, reason: "race", additional_attempts: 3 },
        "retry-1",
      ),
    );
    const [budget] = await db.query("SELECT attempt_budget FROM deliveries WHERE id = ?", [row.id]);
    assert.equal(budget.attempt_budget, 4, "the budget grew once");
    const ra = await db.query(
      "SELECT COUNT(*) AS n FROM audit_records WHERE delivery_id = ? AND action = 'delivery.retry'",
      [row.id],
    );
    assert.equal(Number(ra[0].n), 1);

    // create: one subscription.
    const name = `raced-${q.slice(0, 6)}`;
    once(await race("/v1/subscriptions", { name, queue_id: q }, "create-1"), 201);
    const subs = await db.query("SELECT COUNT(*) AS n FROM subscriptions WHERE name = ?", [name]);
    assert.equal(Number(subs[0].n), 1);
  });

  // Consumers that keep up (purges take only what was delivered) and consumers that lag
  // behind the producers (purges take what was not materialised yet: a gap).
  for (const [pace, ackDelayMs] of [
    ["keep up", [0, 40]],
    ["lag", [400, 800]],
  ] as const)
    it(`never lets a purge racing materialisation skip an event silently, with consumers that ${pace}: each is delivered, or the gap is reported and the cursor stays`, async () => {
      const own = await bootstrap(db.url, {
        namespace: `purged-${ackDelayMs[0]}`,
        application: "app",
        queues: ["a", "b"],
        eventAccess: true,
      });
      const [qa, qb] = own.queues.map((x) => x.id) as [string, string];
      const papis = nodes.map((n) => client(n.url, own.token));
      const create = async (body: Record<string, unknown>) =>
        (await papis[0]!.post("/v1/subscriptions", body)).json.data.subscription.id as string;
      // Consumed: every result of queue a. Owed nothing (only cancelled results are made): queue a's successes, queue b's failures.
      const all = await create({ name: "a-all", queue_id: qa, max_pending: 6 });
      const none = await create({ name: "a-succeeded", queue_id: qa, types: ["task.succeeded"] });
      const other = await create({ name: "b-failed", queue_id: qb, types: ["task.failed", "task.needs_review"] });
      const gaps: Frame[] = [];
      const acked = new Set<string>();
      const consumers = await Promise.all(
        [0, 1].map(async (n) => {
          const s = await connect(nodes[n]!.url, { token: own.token });
          open.push(s);
          assert.equal((await s.hello(all, 2 + n)).type, "events.welcome");
          s.ws.on("message", (data) => {
            const f = JSON.parse(data.toString()) as Frame;
            if (f.type === "error") gaps.push(f);
            if (f.type !== "event.deliver") return;
            setTimeout(
              () => void s.ack(f).then((a) => a.type === "ack" && acked.add(a.body.delivery_id)),
              ackDelayMs[0] + Math.random() * (ackDelayMs[1] - ackDelayMs[0]),
            );
          });
          return s;
        }),
      );
      const idle = await Promise.all(
        [none, other].map(async (sub, n) => {
          const s = await connect(nodes[n]!.url, { token: own.token });
          open.push(s);
          assert.equal((await s.hello(sub, 4)).type, "events.welcome");
          return s;
        }),
      );
      let producing = true;
      const pinger = (async () => {
        while (producing) {
          await Promise.all(
            [...consumers, ...idle]
              .filter((s) => s.ws.readyState === s.ws.OPEN)
              .map((s) => s.ping().catch(() => undefined)),
          );
          await sleep(100);
        }
      })();
      // task id of every numbered event, read before any purge can take it.
      const seqOf = new Map<string, { seq: bigint; queue: string }>();
      const readLogInto = async () => {
        await waitSequenced(db, own.namespace_id);
        const [h] = await db.query("SELECT head_sequence FROM namespace_streams WHERE namespace_id = ?", [
          own.namespace_id,
        ]);
        const rows = await db.query(
          "SELECT aggregate_id, sequence, queue_id, type FROM result_events WHERE namespace_id = ? AND sequence <= ?",
          [own.namespace_id, h.head_sequence],
        );
        for (const r of rows)
          if (r.type === "task.cancelled") seqOf.set(r.aggregate_id, { seq: BigInt(r.sequence), queue: r.queue_id });
        return BigInt(h.head_sequence);
      };
      const tasks = { a: [] as string[], b: [] as string[] };
      const producers = Promise.all(
        [0, 1].map(async (n) => {
          for (let i = 0; i < 30; i++) {
            tasks.a.push(...(await cancelledResults(papis[n]!, qa, 1)));
            tasks.b.push(...(await cancelledResults(papis[1 - n]!, qb, 1)));
          }
        }),
      );
      let purges = 0;
      const purger = (async () => {
        let done = false;
        void producers.then(() => (done = true));
        // At least two purges, also when the producers finish first: the lagging consumers
        // still materialise while they run.
        while (!done || purges < 2) {
          await sleep(50 + Math.random() * 150);
          const head = await readLogInto();
          const r = await runCli(["purge", "--namespace", `purged-${ackDelayMs[0]}`, "--before", String(head + 1n)], {
            ORBIT_DATABASE_URL: db.url,
          });
          assert.equal(r.code, 0, r.stderr);
          purges++;
        }
      })();
      await Promise.all([producers, purger]);
      await readLogInto();
      producing = false;
      await pinger;
      assert.ok(purges >= 2, `purges: ${purges}`);
      // A fresh connection either drains what is owed or is told of the gap.
      const last = await connect(nodes[1]!.url, { token: own.token });
      open.push(last);
      assert.equal((await last.hello(all, 32)).type, "events.welcome");
      last.ws.on("message", (data) => {
        const f = JSON.parse(data.toString()) as Frame;
        if (f.type === "event.deliver") void last.ack(f).then((a) => a.type === "ack" && acked.add(a.body.delivery_id));
      });
      let stuck = false;
      await until("drained or told of the gap", async () => {
        if (last.frames.some((f) => f.type === "error" && f.error!.code === "EVENT_HISTORY_EXPIRED"))
          return (stuck = true);
        const st = await states(all);
        return (st.ACKED ?? 0) === tasks.a.length && Object.keys(st).length === 1;
      });
      // A lagging consumer's ACK can come after its lease ran out and was re-sent: DELIVERY_LEASE_LOST, and nothing else.
      assert.ok(
        gaps.every((g) => g.error!.code === "EVENT_HISTORY_EXPIRED" || g.error!.code === "DELIVERY_LEASE_LOST"),
        JSON.stringify(gaps),
      );
      if (gaps.some((g) => g.error!.code === "EVENT_HISTORY_EXPIRED"))
        assert.ok(stuck, "a gap once reported stays reported");

      const [sub] = await db.query("SELECT cursor_sequence FROM subscriptions WHERE id = ?", [all]);
      const [stream] = await db.query(
        "SELECT retention_boundary, head_sequence FROM namespace_streams WHERE namespace_id = ?",
        [own.namespace_id],
      );
      const cursor = BigInt(sub.cursor_sequence);
      const boundary = BigInt(stream.retention_boundary);
      const rows = await db.query("SELECT d.sequence, d.state FROM deliveries d WHERE d.subscription_id = ?", [all]);
      const materialised = new Set(rows.map((r) => BigInt(r.sequence)));
      assert.ok(
        rows.every((r) => BigInt(r.sequence) <= cursor),
        "nothing materialised past the cursor",
      );
      assert.ok(
        rows.every((r) => r.state === "ACKED"),
        `everything materialised was delivered and ACKed, gap or not: ${JSON.stringify(await states(all))}`,
      );
      const missing = tasks.a.filter((t) => !materialised.has(seqOf.get(t)!.seq));
      for (const t of missing)
        assert.ok(seqOf.get(t)!.seq > cursor, `task ${t} at ${seqOf.get(t)!.seq} skipped below the cursor ${cursor}`);
      if (missing.length > 0) {
        assert.ok(
          stuck && cursor < boundary,
          `${missing.length} results not delivered, yet no gap reported (cursor ${cursor}, boundary ${boundary})`,
        );
      } else {
        assert.equal(stuck, false, "a gap reported though nothing was lost");
      }
      // The subscriptions owed nothing lose nothing to the purges: no gap, and they follow the head.
      idle.forEach((s, i) =>
        assert.ok(
          !s.frames.some((f) => f.type === "error"),
          `${["a-succeeded", "b-failed"][i]}: ${JSON.stringify(s.frames.filter((f) => f.type === "error"))}`,
        ),
      );
      await Promise.all(idle.map((s) => s.ping()));
      for (const id of [none, other]) {
        const [r] = await db.query("SELECT cursor_sequence FROM subscriptions WHERE id = ?", [id]);
        assert.ok(
          BigInt(r.cursor_sequence) >= boundary,
          `${id}: cursor ${r.cursor_sequence} below the boundary ${boundary}`,
        );
      }
      const [owed] = await db.query("SELECT COUNT(*) AS n FROM deliveries WHERE subscription_id IN (?, ?)", [
        none,
        other,
      ]);
      assert.equal(Number(owed.n), 0, "no delivery of a type a subscription excludes");
    });

  it("closes every connection of a credential revoked mid-stream on both nodes with UNAUTHENTICATED, sends nothing after, and keeps the books straight", async () => {
    const consumerCred = await bootstrap(db.url, {
      namespace: "revoked",
      application: "app",
      queues: ["q"],
      eventAccess: true,
    });
    const producerCred = await bootstrap(db.url, { namespace: "revoked", application: "app", queues: ["q"] });
    const q = consumerCred.queues[0]!.id;
    const sub = (
      await client(nodes[0]!.url, consumerCred.token).post("/v1/subscriptions", {
        name: "r",
        queue_id: q,
        max_pending: 30,
      })
    ).json.data.subscription.id;
    const ackReplies: Frame[] = [];
    const sockets = await Promise.all(
      [2, 3, 1, 2].map(async (cap, i) => {
        const s = await connect(nodes[i % 2]!.url, { token: consumerCred.token });
        open.push(s);
        assert.equal((await s.hello(sub, cap)).type, "events.welcome");
        s.ws.on("message", (data) => {
          const f = JSON.parse(data.toString()) as Frame;
          if (f.type === "ack" && f.body.delivery_id) ackReplies.push(f);
          if (f.type === "event.deliver")
            setTimeout(() => s.ws.readyState === s.ws.OPEN && s.ack(f).catch(() => undefined), Math.random() * 30);
        });
        return s;
      }),
    );
    let producing = true;
    const pinger = (async () => {
      while (producing) {
        for (const s of sockets)
          if (s.ws.readyState === s.ws.OPEN)
            s.send({
              protocol_version: "1",
              type: "events.ping",
              message_id: randomHex(),
              session_id: s.sessionId,
              body: {},
            });
        await sleep(100);
      }
    })();
    const papis = nodes.map((n) => client(n.url, producerCred.token));
    let made = 0;
    const producers = Promise.all(
      [0, 1].map(async (n) => {
        while (made < 80) {
          const mine = ++made;
          await cancelledResults(papis[n]!, q, 1);
          if (mine === 40)
            assert.equal(
              (await runCli(["revoke", "--credential", consumerCred.credential_id], { ORBIT_DATABASE_URL: db.url }))
                .code,
              0,
            );
        }
      }),
    );
    await producers;
    const closes = await Promise.all(sockets.map((s) => s.closed));
    producing = false;
    await pinger;
    for (const [i, s] of sockets.entries()) {
      assert.equal(closes[i]!.code, 1008, `connection ${i}`);
      const errors = s.frames.filter((f) => f.type === "error");
      assert.deepEqual(
        errors.map((f) => f.error!.code),
        ["UNAUTHENTICATED"],
        `connection ${i}: ${JSON.stringify(errors)}`,
      );
      assert.equal(errors[0]!.session_id, s.sessionId);
      assert.equal(s.frames[s.frames.length - 1], errors[0], `connection ${i}: nothing after the error`);
    }
    assert.equal((await refusal(connect(nodes[1]!.url, { token: consumerCred.token }))).status, 401);
    // Books: every counted ACK reply is an ACKED delivery with one audit; nothing ACKED without one.
    const counted = new Set(ackReplies.filter((a) => !a.body.deduplicated).map((a) => a.body.delivery_id as string));
    const acked = await db.query("SELECT id FROM deliveries WHERE subscription_id = ? AND state = 'ACKED'", [sub]);
    const audits = await ackAudits(sub);
    for (const id of counted)
      assert.ok(
        acked.some((r) => r.id === id),
        `${id} answered as ACKED`,
      );
    assert.ok(
      acked.every((r) => audits.get(r.id)?.length === 1),
      "one ACK audit per ACKED delivery",
    );
    assert.equal(audits.size, acked.length);
    const s = await db.query(
      "SELECT COUNT(*) AS n FROM deliveries WHERE subscription_id = ? AND state IN ('PENDING', 'LEASED', 'EXPIRED')",
      [sub],
    );
    assert.ok(Number(s[0].n) <= 30, "the backlog within max_pending");
    // Nothing is claimed for the revoked credential afterwards (no connection can be opened, none is left).
    const frozen = await claimFootprint(sub);
    await sleep(LEASE_MS + 200);
    assert.equal(await claimFootprint(sub), frozen);
  });
});

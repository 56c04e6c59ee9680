// What a client was told survives the node at every transaction boundary: a node
// is SIGKILLed, or its database connection cut, while workers complete and a consumer
// receives and ACKs. Afterwards every answer the clients got is in the database — a 200
// completion its task's change and its one event, a deliver frame its lease (that epoch
// or a later one), an ACK receipt its ACKED row with the same acknowledged_at — the log
// is 1..N with no gap and each task's events in its commit order, and after a restart
// every result still reaches the subscription and is ACKed once.
import { strict as assert } from "node:assert";
import { freshDatabase, MYSQL_PORT, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, readLog, waitSequenced, type Client } from "../helpers/api.js";
import { claimedTasks, grantedQueue, queueWithSubscription } from "../helpers/fixtures.js";
import { startProxy, type Proxy } from "../helpers/proxy.js";
import { connect, mid, type Frame, type TestSocket } from "../helpers/ws.js";
import { assertError } from "../helpers/contract.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const env = { ORBIT_LEASE_DURATION_MS: "1000" };

describe("transaction boundaries under faults", function () {
  this.timeout(120000);
  let db: TestDatabase;
  let cred: BootstrapOutput;
  const nodes: OrbitNode[] = [];
  const sockets: TestSocket[] = [];
  let proxy: Proxy | undefined;

  before(async () => {
    db = await freshDatabase("faults_boundaries");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["base"], eventAccess: true });
  });
  afterEach(async () => {
    for (const s of sockets.splice(0)) s.ws.terminate();
    await Promise.all(nodes.splice(0).map((n) => n.stop("SIGKILL")));
    await proxy?.close();
    proxy = undefined;
  });
  after(async () => {
    await db?.drop();
  });

  /** A consumer that ACKs every delivery as it arrives; its frames and receipts are kept. */
  async function acking(url: string, sub: string, capacity: number) {
    const s = await connect(url, { token: cred.token });
    sockets.push(s);
    assert.equal((await s.hello(sub, capacity)).type, "events.welcome");
    const receipts: Frame[] = [];
    s.ws.on("message", (data) => {
      const f = JSON.parse(String(data)) as Frame;
      if (f.type === "event.deliver") {
        s.send({
          protocol_version: "1",
          type: "event.ack",
          message_id: mid(),
          session_id: s.sessionId,
          body: {
            delivery_id: f.body.delivery.id,
            epoch: f.body.delivery.lease_epoch,
            lease_secret: f.body.lease_secret,
          },
        });
      }
      if (f.type === "ack" && f.body?.delivery_id) receipts.push(f);
    });
    return { s, receipts, delivered: () => s.frames.filter((f) => f.type === "event.deliver") };
  }

  /** Every frame and receipt the consumer got is durable: leases at that epoch or later, ACKs as confirmed. */
  async function assertToldIsDurable(delivered: Frame[], receipts: Frame[]) {
    for (const f of delivered) {
      const [r] = await db.query("SELECT lease_epoch, state FROM deliveries WHERE id = ?", [f.body.delivery.id]);
      assert.ok(
        r && BigInt(r.lease_epoch) >= BigInt(f.body.delivery.lease_epoch),
        `the lease of a sent frame is durable: ${JSON.stringify(r)}`,
      );
    }
    for (const a of receipts) {
      const [r] = await db.query("SELECT state, acknowledged_at FROM deliveries WHERE id = ?", [a.body.delivery_id]);
      assert.equal(r?.state, "ACKED", `a confirmed ACK is durable (${a.body.delivery_id})`);
      assert.equal((r.acknowledged_at as Date).toISOString(), new Date(a.body.acknowledged_at).toISOString());
    }
  }

  /** The namespace's log is 1..head with no gap, and each task's events come in revision order. */
  async function assertLogWhole() {
    await waitSequenced(db, cred.namespace_id);
    const { head, events } = await readLog(db, cred.namespace_id);
    assert.deepEqual(
      events.map((e) => BigInt(e.sequence)),
      Array.from({ length: events.length }, (_, i) => BigInt(i + 1)),
      "sequences 1..N",
    );
    assert.equal(head, BigInt(events.length));
    const last = new Map<string, bigint>();
    for (const e of events) {
      const r = BigInt(e.aggregate_revision);
      assert.ok((last.get(e.aggregate_id) ?? 0n) < r, `task ${e.aggregate_id}: events in commit order`);
      last.set(e.aggregate_id, r);
    }
  }

  /** After a restart: every result of the subscription is ACKED once (one audit record each). */
  async function drainAfterRestart(url: string, sub: string, results: number) {
    const { s } = await acking(url, sub, 8);
    for (const end = Date.now() + 30000; ; await sleep(200)) {
      const [r] = await db.query(
        "SELECT SUM(state = 'ACKED') AS acked, COUNT(*) AS n FROM deliveries WHERE subscription_id = ?",
        [sub],
      );
      if (Number(r.acked) === results && Number(r.n) === results) break;
      assert.ok(Date.now() < end, `not all ACKED after the restart: ${JSON.stringify(r)}`);
    }
    const [a] = await db.query(
      "SELECT COUNT(*) AS n, COUNT(DISTINCT delivery_id) AS d FROM audit_records WHERE subscription_id = ? AND action = 'delivery.ack'",
      [sub],
    );
    assert.deepEqual([Number(a.n), Number(a.d)], [results, results], "one ACK audit record per delivery");
    s.ws.terminate();
  }

  /** The numbered events of the namespace are exactly 1..head: none numbered above the head, none missing below it. */
  async function assertNumberedUpToHead() {
    const [r] = await db.query(
      `SELECT n.head_sequence AS head, COUNT(e.sequence) AS numbered, COALESCE(MAX(e.sequence), 0) AS top
         FROM namespace_streams n LEFT JOIN result_events e ON e.namespace_id = n.namespace_id AND e.sequence IS NOT NULL
        WHERE n.namespace_id = ? GROUP BY n.head_sequence`,
      [cred.namespace_id],
    );
    assert.deepEqual(
      [String(r.numbered), String(r.top)],
      [String(r.head), String(r.head)],
      `numbered events are 1..head: ${JSON.stringify(r)}`,
    );
  }

  /** n tasks claimed on a queue of their own, completed 8 at a time; returns the ids of those answered 200. */
  async function completeAll(api: Client, t: { taskId: string; attemptId: string }[]): Promise<string[]> {
    const answered: string[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < t.length) {
          const x = t[next++]!;
          const res = await api
            .post(`/v1/worker/attempts/${x.attemptId}:complete`, { outcome: "succeeded" }, null)
            .catch(() => undefined);
          if (res?.status === 200) answered.push(x.taskId);
        }
      }),
    );
    return answered;
  }

  it("numbers nothing without the head when the sequencer's connection is cut as it numbers, and numbers it all later", async () => {
    proxy = await startProxy(MYSQL_PORT);
    const node = await startNode(db.urlVia(proxy), env);
    nodes.push(node);
    const api = client(node.url, cred.token);
    const t = await claimedTasks(api, await grantedQueue(db, cred, "seq-cut"), 40);
    // The round trip that moves the head (with the sequences and COMMIT) never reaches the database.
    const cut = proxy.cutWhen("UPDATE namespace_streams SET head_sequence");
    const answered = await completeAll(api, t);
    await cut;
    assert.equal(answered.length, t.length, "the completions do not depend on the sequencer");
    await assertNumberedUpToHead();
    // Numbered afterwards, by the next kick or the sweep: each completion its one event.
    await assertLogWhole();
    const { events } = await readLog(db, cred.namespace_id);
    assert.deepEqual(
      events
        .filter((e) => answered.includes(e.aggregate_id))
        .map((e) => e.aggregate_id)
        .sort(),
      [...answered].sort(),
    );
  });

  it("keeps the numbering whole when the node is SIGKILLed as its sequencer commits", async () => {
    proxy = await startProxy(MYSQL_PORT);
    const node = await startNode(db.urlVia(proxy), env);
    nodes.push(node);
    const api = client(node.url, cred.token);
    const q = await grantedQueue(db, cred, "seq-kill");
    const t = await claimedTasks(api, q, 40);
    // The numbering round trip reaches the database; its answer never reaches the node.
    proxy.stallWhen("UPDATE result_events SET sequence");
    const run = completeAll(api, t);
    for (const end = Date.now() + 10000; !proxy.stalled; await sleep(5))
      assert.ok(Date.now() < end, "the sequencer numbered");
    await sleep(20);
    await node.stop("SIGKILL");
    const answered = await run;
    assert.ok(answered.length > 0, "completions were answered");
    await assertNumberedUpToHead();
    const rows = await db.query("SELECT state FROM tasks WHERE id IN (?)", [answered]);
    assert.deepEqual(
      rows.map((r) => r.state),
      rows.map(() => "SUCCEEDED"),
      "every completion answered 200 is durable",
    );

    const again = await startNode(db.url, env);
    nodes.push(again);
    const api2 = client(again.url, cred.token);
    assert.equal((await completeAll(api2, t)).length, t.length, "the rest complete on the new node");
    // And more after them: numbered after what the dead node numbered, never over it.
    assert.equal((await completeAll(api2, await claimedTasks(api2, q, 10))).length, 10);
    await assertLogWhole();
  });

  it("numbers at once a completion whose COMMIT ran but whose answer was lost, not at the sweep", async () => {
    proxy = await startProxy(MYSQL_PORT);
    // The sweep an hour away: only the node's own kick can number the event in time.
    const node = await startNode(db.urlVia(proxy), { ...env, ORBIT_SEQUENCER_SWEEP_MS: "3600000" });
    nodes.push(node);
    const api = client(node.url, cred.token);
    const [x] = await claimedTasks(api, await grantedQueue(db, cred, "commit-lost"), 1);
    // The completion's write round trip (its writes and COMMIT) runs; its answer is lost.
    proxy.stallWhen("UPDATE task_attempts SET ended_at");
    const call = api.post(`/v1/worker/attempts/${x!.attemptId}:complete`, { outcome: "succeeded" }, null);
    for (const end = Date.now() + 10000; ; await sleep(20)) {
      const [t] = await db.query("SELECT state FROM tasks WHERE id = ?", [x!.taskId]);
      if (proxy.stalled && t.state === "SUCCEEDED") break;
      assert.ok(Date.now() < end, "the completion committed");
    }
    proxy.cutStalled();
    const lost = await call;
    assertError(lost, 503, "UNAVAILABLE");
    // Numbered without any other call (the worker's retry below appends nothing: it finds
    // its attempt ended and answers as the first did).
    await waitSequenced(db, cred.namespace_id, 10000);
    const retry = await api.post(`/v1/worker/attempts/${x!.attemptId}:complete`, { outcome: "succeeded" }, null);
    assert.equal(retry.status, 200, retry.text);
    assert.equal(retry.json.data.task.state, "SUCCEEDED");
    await assertNumberedUpToHead();
    const { events } = await readLog(db, cred.namespace_id);
    assert.equal(events.filter((e) => e.aggregate_id === x!.taskId).length, 1, "one event for the one completion");
  });

  it("keeps every completion, lease and ACK receipt it gave when the node is SIGKILLed mid-stream", async () => {
    const node = await startNode(db.url, env);
    nodes.push(node);
    const api = client(node.url, cred.token);
    const { q, sub } = await queueWithSubscription(db, cred, api, { from_sequence: null });
    const t = await claimedTasks(api, q, 120);
    const consumer = await acking(node.url, sub, 8);
    const answered = new Set<string>();
    let next = 0;
    const workers = Array.from({ length: 12 }, async () => {
      while (next < t.length) {
        const x = t[next++]!;
        const res = await api
          .post(`/v1/worker/attempts/${x.attemptId}:complete`, { outcome: "succeeded", result: { x: x.taskId } }, null)
          .catch(() => undefined);
        if (res?.status === 200) answered.add(x.taskId);
      }
    });
    for (const end = Date.now() + 20000; consumer.receipts.length < 20; await sleep(5))
      assert.ok(Date.now() < end, "receipts came");
    await node.stop("SIGKILL");
    await Promise.all(workers);
    const delivered = consumer.delivered();
    const receipts = [...consumer.receipts];
    assert.ok(answered.size > 0 && answered.size < t.length, `the kill came mid-run (${answered.size} of ${t.length})`);

    await assertToldIsDurable(delivered, receipts);
    const rows = await db.query("SELECT id, state FROM tasks WHERE id IN (?)", [[...answered]]);
    assert.deepEqual(
      rows.map((r) => r.state),
      rows.map(() => "SUCCEEDED"),
      "every completion answered 200 is durable",
    );

    const again = await startNode(db.url, env);
    nodes.push(again);
    const api2 = client(again.url, cred.token);
    for (const x of t)
      assert.equal(
        (
          await api2.post(
            `/v1/worker/attempts/${x.attemptId}:complete`,
            { outcome: "succeeded", result: { x: x.taskId } },
            null,
          )
        ).status,
        200,
      );
    await assertLogWhole();
    await drainAfterRestart(again.url, sub, t.length);
  });

  it("confirms no ACK and sends no frame that is not durable when the node's database connections are cut", async () => {
    proxy = await startProxy(MYSQL_PORT);
    const node = await startNode(db.urlVia(proxy), { ...env, ORBIT_REQUEST_TIMEOUT_MS: "3000" });
    nodes.push(node);
    const api = client(node.url, cred.token);
    const { q, sub } = await queueWithSubscription(db, cred, api, { from_sequence: null });
    const t = await claimedTasks(api, q, 60);
    for (const x of t)
      assert.equal(
        (await api.post(`/v1/worker/attempts/${x.attemptId}:complete`, { outcome: "succeeded" }, null)).status,
        200,
      );
    await waitSequenced(db, cred.namespace_id);
    const delivered: Frame[] = [];
    const receipts: Frame[] = [];
    // Cut the database under the flowing consumer a few times, each at a different moment.
    for (let round = 0; round < 4; round++) {
      const consumer = await acking(node.url, sub, 8).catch(() => undefined);
      if (consumer) {
        // Once ACKs flow, at a slightly different moment each round.
        for (const end = Date.now() + 5000; consumer.receipts.length === 0 && Date.now() < end;) await sleep(2);
        await sleep(round * 3);
        proxy.cut();
        await consumer.s.closed;
        delivered.push(...consumer.delivered());
        receipts.push(...consumer.receipts);
      }
      proxy.restore();
      await sleep(300);
    }
    assert.ok(
      receipts.length > 0 && receipts.length < t.length,
      `the cuts came mid-stream (${receipts.length} receipts)`,
    );
    await assertToldIsDurable(delivered, receipts);
    await drainAfterRestart(node.url, sub, t.length);
    await assertLogWhole();
  });
  it("sends no ACK receipt when the connection drops while the ACK's COMMIT round trip is under way", async () => {
    proxy = await startProxy(MYSQL_PORT);
    const node = await startNode(db.urlVia(proxy), { ORBIT_REQUEST_TIMEOUT_MS: "3000" });
    nodes.push(node);
    const api = client(node.url, cred.token);
    const { q, sub } = await queueWithSubscription(db, cred, api, { from_sequence: null });
    const [x] = await claimedTasks(api, q, 1);
    assert.equal(
      (await api.post(`/v1/worker/attempts/${x!.attemptId}:complete`, { outcome: "succeeded" }, null)).status,
      200,
    );
    const s = await connect(node.url, { token: cred.token });
    sockets.push(s);
    await s.hello(sub, 1);
    const d = await s.nextOfType("event.deliver");
    // The ACK's second round trip (the ACKED mark, its audit record and COMMIT) waits on
    // this lock: every gap of audit_records, so its INSERT cannot go in.
    const holder = await db.connect();
    await holder.query("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ");
    await holder.query("START TRANSACTION");
    await holder.query("SELECT id FROM audit_records FOR UPDATE");
    try {
      const answer = s.ack(d).catch(() => undefined);
      for (const end = Date.now() + 10000; ; await sleep(20)) {
        const [w] = await db.query(
          "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE DB = ? AND COMMAND = 'Query' AND INFO LIKE '%INSERT INTO audit_records%'",
          [db.name],
        );
        if (Number(w.n) === 1) break;
        assert.ok(Date.now() < end, "the ACK's commit round trip came");
      }
      proxy.cut();
      const got = await Promise.race([answer, s.closed.then(() => undefined)]);
      await holder.query("ROLLBACK");
      const [r] = await db.query("SELECT state FROM deliveries WHERE id = ?", [d.body.delivery.id]);
      if (got?.type === "ack") assert.equal(r.state, "ACKED", "a confirmed ACK is durable");
      assert.notEqual(got?.type, "ack", `no receipt for an ACK whose COMMIT did not complete (the row is ${r.state})`);
    } finally {
      await holder.end();
    }
    proxy.restore();
    // The consumer ACKs again with the same proof after reconnecting: now it is taken.
    for (const end = Date.now() + 10000; (await api.get("/v1/health")).status !== 200; await sleep(200))
      assert.ok(Date.now() < end);
    const again = await connect(node.url, { token: cred.token });
    sockets.push(again);
    await again.hello(sub, 1);
    const receipt = await again.ack(d);
    assert.equal(receipt.type, "ack", JSON.stringify(receipt));
    assert.equal(receipt.body.deduplicated, false);
  });
});

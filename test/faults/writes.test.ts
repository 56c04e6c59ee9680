// What a client was told survives the node at the management and worker write boundaries:
// cancels (of QUEUED and RUNNING tasks), resolves, worker requeues, subscription
// creates and configures and delivery retries run concurrently while the node is SIGKILLed,
// or its database connections cut. Afterwards every 200/201 is durable — the same request
// sent again with its key answers the original receipt, deduplicated — each task's state
// and its one event came together (no change without its event, no event without its
// change), every audited change has its audit record, and the log is 1..N with no gap.
import { strict as assert } from "node:assert";
import { freshDatabase, MYSQL_PORT, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, readLog, waitSequenced, type Client } from "../helpers/api.js";
import { claimedTasks, grantedQueue, queueWithSubscription } from "../helpers/fixtures.js";
import { startProxy, type Proxy } from "../helpers/proxy.js";
import { connect, type TestSocket } from "../helpers/ws.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Delivery leases of 1 s: the EXPIRED deliveries that retries start from come quickly. */
const env = { ORBIT_LEASE_DURATION_MS: "1000" };

interface Write {
  readonly path: string;
  readonly body: unknown;
  /** null: a worker call, idempotent by its attempt and body. */
  readonly key: string | null;
  /** The answer, once one came: status and body. */
  answer?: { status: number; json: any };
}

describe("management and worker writes under faults", function () {
  this.timeout(120000);
  let db: TestDatabase;
  let cred: BootstrapOutput;
  const nodes: OrbitNode[] = [];
  const sockets: TestSocket[] = [];
  let proxy: Proxy | undefined;
  let round = 0;

  before(async () => {
    db = await freshDatabase("faults_writes");
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

  async function waitFor(what: string, check: () => Promise<boolean>, ms = 15000): Promise<void> {
    for (const end = Date.now() + ms; !(await check()); await sleep(50))
      assert.ok(Date.now() < end, `timed out waiting for ${what}`);
  }

  /**
   * Tasks and subscriptions in every state a write starts from, and the writes, each with
   * its own key: 20 cancels of QUEUED and 20 of RUNNING tasks, 20 resolves, 20 requeues,
   * 12 configures, 16 retries of EXPIRED deliveries and 12 creates (a namespace holds 64
   * subscriptions).
   */
  async function scenario(api: Client, url: string): Promise<{ writes: Write[]; tasks: string[]; q: string }> {
    const tag = `r${++round}`;
    const q = await grantedQueue(db, cred, `${tag}-tasks`, true);
    const writes: Write[] = [];
    const tasks: string[] = [];
    const key = () => `${tag}-${writes.length}`;
    for (const x of await claimedTasks(api, q, 20)) {
      tasks.push(x.taskId);
      writes.push({
        path: `/v1/tasks/${x.taskId}:cancel`,
        body: { expected_revision: "2", reason: "running" },
        key: key(),
      });
    }
    for (const x of await claimedTasks(api, q, 20)) {
      tasks.push(x.taskId);
      const done = await api.post(
        `/v1/worker/attempts/${x.attemptId}:complete`,
        { outcome: "needs_review", result: "maybe" },
        null,
      );
      assert.equal(done.json.data.task.revision, "3");
      writes.push({
        path: `/v1/tasks/${x.taskId}:resolve`,
        body: { expected_revision: "3", outcome: "succeeded", result: { ok: 1 }, reason: "looked" },
        key: key(),
      });
    }
    for (const x of await claimedTasks(api, q, 20)) {
      tasks.push(x.taskId);
      writes.push({ path: `/v1/worker/attempts/${x.attemptId}:requeue`, body: { reason: "later" }, key: null });
    }
    // Submitted last: claimedTasks claims the oldest QUEUED task.
    for (let i = 0; i < 20; i++) {
      const t = (await api.post("/v1/tasks", { queue_id: q, input: i })).json.data.task;
      tasks.push(t.id);
      writes.push({ path: `/v1/tasks/${t.id}:cancel`, body: { expected_revision: "1", reason: "queued" }, key: key() });
    }
    for (let i = 0; i < 12; i++) {
      const s = (await api.post("/v1/subscriptions", { name: `${tag}-c${i}`, queue_id: q })).json.data.subscription;
      writes.push({
        path: `/v1/subscriptions/${s.id}:configure`,
        body: { expected_revision: s.revision, enabled: false, reason: "pause" },
        key: key(),
      });
    }
    // EXPIRED deliveries: one attempt each, leased to a consumer that never ACKs.
    const { q: rq, sub } = await queueWithSubscription(db, cred, api, { from_sequence: null, max_attempts: 1 });
    for (let i = 0; i < 16; i++) {
      const t = (await api.post("/v1/tasks", { queue_id: rq, input: i })).json.data.task;
      assert.equal((await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" })).status, 200);
    }
    const s = await connect(url, { token: cred.token });
    sockets.push(s);
    await s.hello(sub, 32);
    await waitFor("16 EXPIRED deliveries", async () => {
      const [r] = await db.query(
        "SELECT COUNT(*) AS n FROM deliveries WHERE subscription_id = ? AND state = 'EXPIRED'",
        [sub],
      );
      return Number(r.n) === 16;
    });
    s.ws.terminate();
    for (const d of await db.query("SELECT id, revision FROM deliveries WHERE subscription_id = ?", [sub])) {
      writes.push({
        path: `/v1/subscriptions/${sub}/deliveries/${d.id}:retry`,
        body: { expected_revision: String(d.revision), additional_attempts: 2, reason: "again" },
        key: key(),
      });
    }
    for (let i = 0; i < 12; i++)
      writes.push({ path: "/v1/subscriptions", body: { name: `${tag}-n${i}`, queue_id: q }, key: key() });
    // Interleaved, so that the fault lands among writes of every kind.
    const kinds = [0, 20, 40, 60, 80, 92, 108].map((start, k, all) => writes.slice(start, all[k + 1] ?? writes.length));
    const mixed: Write[] = [];
    for (let i = 0; mixed.length < writes.length; i++) for (const kind of kinds) if (kind[i]) mixed.push(kind[i]!);
    return { writes: mixed, tasks, q };
  }

  /** Sends the writes, 12 at a time, keeping each answer; resolves once every one was sent. */
  function send(api: Client, writes: Write[]): { sent: Promise<void>; answered: () => number } {
    let next = 0;
    let answered = 0;
    const sent = Promise.all(
      Array.from({ length: 12 }, async () => {
        while (next < writes.length) {
          const w = writes[next++]!;
          const res = await api.post(w.path, w.body, w.key).catch(() => undefined);
          if (res) {
            w.answer = { status: res.status, json: res.json };
            if (res.status < 300) answered++;
          }
        }
      }),
    ).then(() => undefined);
    return { sent, answered: () => answered };
  }

  /**
   * Every write sent again with its key: one answered 200/201 gets its original receipt,
   * deduplicated (its task, subscription or delivery as then); one that was not answered
   * either commits now or was committed, never twice. A worker call repeats the same answer.
   */
  async function replay(api: Client, writes: Write[]): Promise<void> {
    for (const w of writes) {
      const again = await api.post(w.path, w.body, w.key);
      assert.ok(again.status === 200 || again.status === 201, `${w.path}: ${again.status} ${again.text}`);
      if (!w.answer || w.answer.status >= 300) continue;
      const { deduplicated: first, ...original } = w.answer.json.data;
      const { deduplicated, ...now } = again.json.data;
      if (w.key !== null) {
        assert.equal(again.status, 200, `${w.path}: a replay answers 200`);
        assert.equal(first, false);
        assert.equal(
          deduplicated,
          true,
          `${w.path}: a write answered ${w.answer.status} is durable; its replay is deduplicated`,
        );
      }
      assert.deepEqual(now, original, `${w.path}: the replay answers the original receipt`);
    }
  }

  /** Each task's state and its events came together; audited changes have their records; the log is whole. */
  async function assertNothingHalfWritten(tasks: string[]): Promise<void> {
    await waitSequenced(db, cred.namespace_id);
    const { head, events } = await readLog(db, cred.namespace_id);
    assert.deepEqual(
      events.map((e) => BigInt(e.sequence)),
      Array.from({ length: events.length }, (_, i) => BigInt(i + 1)),
      "sequences 1..N",
    );
    assert.equal(head, BigInt(events.length));
    const rows = await db.query(
      `SELECT t.id, t.state, t.revision, t.effect_uncertain, a.ended_by
         FROM tasks t LEFT JOIN task_attempts a ON a.id = (SELECT MAX(x.id) FROM task_attempts x WHERE x.task_id = t.id)
        WHERE t.id IN (?)`,
      [tasks],
    );
    const byTask = new Map<string, typeof events>();
    for (const e of events) byTask.set(e.aggregate_id, [...(byTask.get(e.aggregate_id) ?? []), e]);
    for (const t of rows) {
      const mine = byTask.get(t.id) ?? [];
      const last = mine.at(-1);
      if (t.state === "QUEUED" && t.revision === "1")
        assert.equal(mine.length, 0, `task ${t.id}: no event before a change`);
      else if (t.state === "RUNNING") assert.equal(mine.length, 0, `task ${t.id}: RUNNING with ${last?.type}`);
      else {
        assert.ok(last, `task ${t.id}: ${t.state} at ${t.revision} without its event`);
        assert.deepEqual(
          [last.details.state, last.aggregate_revision],
          [t.state, String(t.revision)],
          `task ${t.id}: its last event is its state`,
        );
      }
      const revisions = mine.map((e) => e.aggregate_revision);
      assert.deepEqual(revisions, [...new Set(revisions)], `task ${t.id}: one event per change`);
      if (t.state === "CANCELLED" && t.effect_uncertain)
        assert.equal(t.ended_by, "cancelled", `task ${t.id}: its attempt ended with the cancel`);
      if (t.state === "RUNNING") assert.equal(t.ended_by, null, `task ${t.id}: its attempt is open`);
    }
    const [unaudited] = await db.query(
      `SELECT (SELECT COUNT(*) FROM subscriptions s WHERE s.revision > 1 AND s.revision - 1 <>
                 (SELECT COUNT(*) FROM audit_records a WHERE a.subscription_id = s.id AND a.action = 'subscription.configure')) AS subscriptions,
              (SELECT COUNT(*) FROM deliveries d JOIN subscriptions s ON s.id = d.subscription_id WHERE d.attempt_budget - s.max_attempts <>
                 2 * (SELECT COUNT(*) FROM audit_records a WHERE a.delivery_id = d.id AND a.action = 'delivery.retry')) AS deliveries`,
    );
    assert.deepEqual(
      [Number(unaudited.subscriptions), Number(unaudited.deliveries)],
      [0, 0],
      "every configure and retry has its audit record",
    );
  }

  /**
   * Worker claims, completions and the recovery of attempts whose lease ran out (by the
   * sweep and by claims), with the sequencer numbering behind them, while the database is
   * cut three times and the node is then SIGKILLed: every claim answered 200 is its
   * attempt, every completion answered 200 ended it, and every attempt that ended has its
   * one event, its task's state with it.
   */
  it("keeps every worker claim and completion it answered, and each expiry whole, through cuts and a SIGKILL", async () => {
    proxy = await startProxy(MYSQL_PORT);
    const workerEnv = { ORBIT_WORKER_LEASE_MS: "300", ORBIT_REQUEST_TIMEOUT_MS: "3000" };
    const node = await startNode(db.urlVia(proxy), workerEnv);
    nodes.push(node);
    const api = client(node.url, cred.token);
    const q = await grantedQueue(db, cred, `r${++round}-workers`);
    const tasks: string[] = [];
    for (let i = 0; i < 60; i++)
      tasks.push((await api.post("/v1/tasks", { queue_id: q, input: i, max_attempts: 2 })).json.data.task.id);
    const claims: { attemptId: string; taskId: string; attempts: number }[] = [];
    const completed: string[] = [];
    let stop = false;
    let k = 0;
    // Each worker completes every other task it claims and abandons the rest (its lease runs out).
    const workers = Array.from({ length: 6 }, async () => {
      while (!stop) {
        const c = await api.post("/v1/worker/claim", { queue_id: q }, null).catch(() => undefined);
        if (c?.status !== 200) {
          await sleep(20);
          continue;
        }
        claims.push({
          attemptId: c.json.data.attempt_id,
          taskId: c.json.data.task.id,
          attempts: c.json.data.task.attempts,
        });
        if (k++ % 2 === 1) continue;
        const done = await api
          .post(`/v1/worker/attempts/${c.json.data.attempt_id}:complete`, { outcome: "succeeded" }, null)
          .catch(() => undefined);
        if (done?.status === 200) completed.push(c.json.data.attempt_id);
      }
    });
    for (let i = 0; i < 3; i++) {
      await sleep(400 + i * 37);
      proxy.cut();
      await sleep(50);
      proxy.restore();
    }
    await sleep(300);
    await node.stop("SIGKILL");
    stop = true;
    await Promise.all(workers);
    assert.ok(
      claims.length > 10 && completed.length > 5,
      `claims (${claims.length}) and completions (${completed.length}) were answered`,
    );

    const attempts = new Map(
      (await db.query("SELECT id, task_id, number, ended_by FROM task_attempts WHERE task_id IN (?)", [tasks])).map(
        (a) => [a.id, a],
      ),
    );
    for (const c of claims) {
      const a = attempts.get(c.attemptId);
      assert.deepEqual(
        a && [a.task_id, a.number],
        [c.taskId, c.attempts],
        `the claim of attempt ${c.attemptId} is durable`,
      );
    }
    for (const id of completed)
      assert.equal(attempts.get(id)?.ended_by, "complete", `the completion of attempt ${id} is durable`);

    // A new node recovers what the dead one left RUNNING; then every attempt has ended.
    const again = await startNode(db.url, workerEnv);
    nodes.push(again);
    await waitFor("no RUNNING task", async () => {
      const [r] = await db.query("SELECT COUNT(*) AS n FROM tasks WHERE id IN (?) AND state = 'RUNNING'", [tasks]);
      return Number(r.n) === 0;
    });
    await waitSequenced(db, cred.namespace_id);
    const { head, events } = await readLog(db, cred.namespace_id);
    assert.deepEqual(
      events.map((e) => BigInt(e.sequence)),
      Array.from({ length: events.length }, (_, i) => BigInt(i + 1)),
      "sequences 1..N",
    );
    assert.equal(head, BigInt(events.length));
    const ended = await db.query("SELECT id, ended_by FROM task_attempts WHERE task_id IN (?)", [tasks]);
    for (const a of ended) {
      const mine = events.filter((e) => e.snapshot.current_attempt_id === a.id);
      const want =
        a.ended_by === "complete"
          ? [["task.succeeded", "WORKER_SUCCEEDED"]]
          : a.ended_by === "expired"
            ? [[mine[0]?.type, mine[0]?.details.reason]]
            : [];
      assert.deepEqual(
        mine.map((e) => [e.type, e.details.reason]),
        want,
        `attempt ${a.id} (${a.ended_by}): one event`,
      );
      if (a.ended_by === "expired")
        assert.ok(["LEASE_EXPIRED", "ATTEMPTS_EXHAUSTED"].includes(mine[0]!.details.reason), mine[0]!.details.reason);
      assert.ok(a.ended_by === "complete" || a.ended_by === "expired", `attempt ${a.id} ended (${a.ended_by})`);
    }
    for (const t of await db.query("SELECT id, state, revision FROM tasks WHERE id IN (?)", [tasks])) {
      const last = events.filter((e) => e.aggregate_id === t.id).at(-1);
      if (t.state === "QUEUED" && t.revision === "1") assert.equal(last, undefined);
      else
        assert.deepEqual(
          [last?.details.state, last?.aggregate_revision],
          [t.state, String(t.revision)],
          `task ${t.id}: its last event is its state`,
        );
    }
  });

  it("keeps every write it answered, and none half-written, when the node is SIGKILLed among them", async () => {
    const node = await startNode(db.url, env);
    nodes.push(node);
    const api = client(node.url, cred.token);
    const { writes, tasks } = await scenario(api, node.url);
    const run = send(api, writes);
    await waitFor("some answers", async () => run.answered() >= writes.length / 3, 20000);
    await node.stop("SIGKILL");
    await run.sent;
    const answered = writes.filter((w) => w.answer && w.answer.status < 300).length;
    assert.ok(answered < writes.length, `the kill came mid-run (${answered} of ${writes.length})`);
    for (const w of writes)
      if (w.answer) assert.ok(w.answer.status < 300, `${w.path}: ${w.answer.status} ${JSON.stringify(w.answer.json)}`);

    const again = await startNode(db.url, env);
    nodes.push(again);
    await assertNothingHalfWritten(tasks);
    await replay(client(again.url, cred.token), writes);
    await assertNothingHalfWritten(tasks);
  });

  it("keeps every write it answered, and none half-written, when the node's database connections are cut among them", async () => {
    proxy = await startProxy(MYSQL_PORT);
    const node = await startNode(db.urlVia(proxy), { ...env, ORBIT_REQUEST_TIMEOUT_MS: "3000" });
    nodes.push(node);
    const api = client(node.url, cred.token);
    const { writes, tasks } = await scenario(api, node.url);
    const run = send(api, writes);
    // Cut a few times, each at a different moment; the writes go on meanwhile (503s).
    for (let i = 0; i < 3; i++) {
      const at = run.answered() + 15;
      await waitFor("more answers", async () => run.answered() >= at || writes.every((w) => w.answer), 20000);
      proxy.cut();
      await sleep(30);
      proxy.restore();
    }
    await run.sent;
    const failed = writes.filter((w) => w.answer?.status === 503).length;
    assert.ok(failed > 0, "some writes met a cut");
    for (const w of writes)
      if (w.answer)
        assert.ok(
          w.answer.status < 300 || w.answer.status === 503,
          `${w.path}: ${w.answer.status} ${JSON.stringify(w.answer.json)}`,
        );
    await waitFor("the node to answer again", async () => (await api.get("/v1/health")).status === 200);
    await assertNothingHalfWritten(tasks);
    await replay(api, writes);
    await assertNothingHalfWritten(tasks);
  });
});

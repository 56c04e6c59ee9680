// The last instant of a lease (docs/operations.md "Clocks"): a lease runs out only once the deciding
// node's clock is past lease_until — at lease_until itself it is still leased. For a
// worker attempt the rule is applied by the attempt's own complete call (leaseRanOut) and
// by the claim's and the sweep's recovery (expiredStatement); for a delivery by the
// claim's recovery (lease_expired, recoveryStatements) and its count of what a connection
// holds (held). Each test freezes the node's clock (helpers/clock.ts) and moves it by hand
// to exactly lease_until, then 1 ms past it, so the instant is hit every time, however
// slow the machine; the node's timers keep real time, so its rechecks and sweeps run.
import { strict as assert } from "node:assert";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, readLog, waitSequenced, type Client } from "../helpers/api.js";
import { assertError } from "../helpers/contract.js";
import { TestClock } from "../helpers/clock.js";
import { cancelledResults, grantedQueue, queueWithSubscription } from "../helpers/fixtures.js";
import { connect, type Frame, type TestSocket } from "../helpers/ws.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const WORKER_LEASE_MS = 5000;
// In frozen time a lease lasts until the test moves the clock; 100 ms makes a connection
// recheck (claim) every 100 ms of real time (hub.ts recheckMs).
const DELIVERY_LEASE_MS = 100;

describe("the last instant of a lease", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  let api: Client;
  let clock: TestClock;
  let queueNo = 0;
  const sockets: TestSocket[] = [];

  before(async () => {
    db = await freshDatabase("lease_instant");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["base"], eventAccess: true });
    clock = new TestClock();
    node = await startNode(db.url, {
      ...clock.env(),
      ORBIT_WORKER_LEASE_MS: String(WORKER_LEASE_MS),
      ORBIT_LEASE_DURATION_MS: String(DELIVERY_LEASE_MS),
    });
    api = client(node.url, cred.token);
  });
  afterEach(() => {
    for (const s of sockets.splice(0)) s.close();
  });
  after(async () => {
    await node?.stop();
    await db?.drop();
    clock?.remove();
  });

  /** A task of a queue of its own, claimed: its attempt and lease_until (ms). */
  async function claimed(): Promise<{ q: string; taskId: string; attemptId: string; leaseUntil: number }> {
    const q = await grantedQueue(db, cred, `w${++queueNo}`);
    const task = (await api.post("/v1/tasks", { queue_id: q, input: { job: 1 } })).json.data.task;
    const res = await api.post("/v1/worker/claim", { queue_id: q }, null);
    assert.equal(res.status, 200, res.text);
    const leaseUntil = Date.parse(res.json.data.lease_until);
    assert.equal(leaseUntil, clock.now + WORKER_LEASE_MS, "lease_until is the node's clock plus the lease");
    return { q, taskId: task.id, attemptId: res.json.data.attempt_id, leaseUntil };
  }

  const eventsOf = async (taskId: string) => {
    await waitSequenced(db, cred.namespace_id);
    return (await readLog(db, cred.namespace_id)).events
      .filter((e) => e.aggregate_id === taskId)
      .map((e) => [e.type, e.details.reason]);
  };

  it("keeps a worker attempt at lease_until: a claim of its queue does not recover it, and its completion is taken", async () => {
    const { q, taskId, attemptId, leaseUntil } = await claimed();
    clock.set(leaseUntil);
    // The claim recovers its queue's expired attempts first: this one is not, so the
    // queue is empty (one more rule, and the claim would have taken the task again).
    const again = await api.post("/v1/worker/claim", { queue_id: q }, null);
    assert.equal(again.status, 204, again.text);
    // The sweep (every second) applies the same rule: give it a turn at this instant too.
    await sleep(1500);
    const done = await api.post(`/v1/worker/attempts/${attemptId}:complete`, { outcome: "succeeded", result: 1 }, null);
    assert.equal(done.status, 200, done.text);
    assert.equal(done.json.data.task.state, "SUCCEEDED");
    assert.deepEqual(
      await eventsOf(taskId),
      [["task.succeeded", "WORKER_SUCCEEDED"]],
      "no task.requeued at the lease's last instant",
    );
  });

  it("lets a worker attempt run out 1 ms past lease_until: its completion is 409 and the task requeued", async () => {
    const { taskId, attemptId, leaseUntil } = await claimed();
    clock.set(leaseUntil + 1);
    const late = await api.post(`/v1/worker/attempts/${attemptId}:complete`, { outcome: "succeeded", result: 1 }, null);
    assertError(late, 409, "STATE_CONFLICT");
    assert.equal((await api.get(`/v1/tasks/${taskId}`)).json.data.state, "QUEUED");
    assert.deepEqual(await eventsOf(taskId), [["task.requeued", "LEASE_EXPIRED"]]);
  });

  it("lets a claim recover a worker attempt 1 ms past lease_until and hand the task out again", async () => {
    const { q, taskId, leaseUntil } = await claimed();
    clock.set(leaseUntil + 1);
    const again = await api.post("/v1/worker/claim", { queue_id: q }, null);
    assert.equal(again.status, 200, again.text);
    assert.equal(again.json.data.task.id, taskId);
    assert.equal(again.json.data.task.attempts, 2);
  });

  /** Claims this node has run. */
  const claimsRun = async () => {
    const text = (await api.get("/metrics")).text;
    return Number(/^orbit_claim_leases_count (\d+)/m.exec(text)?.[1] ?? 0);
  };
  /**
   * Gives claims at the clock's instant a chance to decide: until the node ran `n` more,
   * `s` got another delivery, or 3 s passed. A connection asks at each recheck (100 ms)
   * while its own count has room: that count frees a lease at lease_until itself
   * (ws/seat.ts room), so the claims come; were it to wait 1 ms more, none would run at
   * the instant and there is nothing to decide — not a failure.
   */
  async function claimsAtThisInstant(s: TestSocket, n: number): Promise<void> {
    const from = await claimsRun();
    const until = performance.now() + 3000;
    while (delivered(s).length === 1 && (await claimsRun()) < from + n && performance.now() < until) await sleep(50);
  }

  /** A consumer of capacity 1 holding the first of two results; the other waits. */
  async function holdingOne(): Promise<{ s: TestSocket; sub: string; first: Frame }> {
    const { q, sub } = await queueWithSubscription(db, cred, api);
    await cancelledResults(api, q, 2);
    await waitSequenced(db, cred.namespace_id);
    const s = await connect(node.url, { token: cred.token });
    sockets.push(s);
    assert.equal((await s.hello(sub, 1)).type, "events.welcome");
    const first = await s.nextOfType("event.deliver");
    assert.equal(Date.parse(first.body.delivery.lease_until), clock.now + DELIVERY_LEASE_MS);
    return { s, sub, first };
  }
  const delivered = (s: TestSocket) => s.frames.filter((f) => f.type === "event.deliver");
  /**
   * `deliver` is still held by `s` at its lease's instant: `s` was sent nothing more, the
   * delivery is LEASED at its first epoch and lease_until, and its ACK is taken.
   */
  async function stillHeld(s: TestSocket, sub: string, deliver: Frame): Promise<void> {
    assert.equal(delivered(s).length, 1, JSON.stringify(delivered(s).map((f) => f.body.delivery)));
    const shown = (await api.get(`/v1/subscriptions/${sub}/deliveries/${deliver.body.delivery.id}`)).json.data.delivery;
    assert.deepEqual(
      [shown.state, shown.lease_epoch, shown.lease_until],
      ["LEASED", "1", deliver.body.delivery.lease_until],
    );
    const ack = await s.ack(deliver);
    assert.equal(ack.type, "ack", JSON.stringify(ack));
    assert.equal(ack.body.deduplicated, false);
  }

  it("keeps a delivery at lease_until: no claim re-sends it or counts it free, and its ACK is taken", async () => {
    const { s, sub, first } = await holdingOne();
    clock.set(Date.parse(first.body.delivery.lease_until));
    await claimsAtThisInstant(s, 3);
    // Still held: not recovered and sent again, and the connection (capacity 1) is sent
    // nothing else while it holds it.
    await stillHeld(s, sub, first);
    // With the first ACKed the connection has room: the other result comes, once.
    const second = await s.nextOfType("event.deliver");
    assert.notEqual(second.body.delivery.id, first.body.delivery.id);
  });

  it("lets a delivery run out 1 ms past lease_until: it is sent again with a new epoch, the old proof lost", async () => {
    const { s, first } = await holdingOne();
    clock.set(Date.parse(first.body.delivery.lease_until) + 1);
    // Recovered deliveries go first (the oldest sequence): the same delivery, epoch 2.
    const again = await s.nextOfType("event.deliver");
    assert.equal(again.body.delivery.id, first.body.delivery.id);
    assert.equal(again.body.delivery.lease_epoch, "2");
    const lost = await s.ack(first);
    assert.equal(lost.error?.code, "DELIVERY_LEASE_LOST", JSON.stringify(lost));
    assert.equal((await s.ack(again)).type, "ack");
  });

  it("recovers in one claim a delivery 1 ms past lease_until and leaves another of the subscription at its instant with its holder", async () => {
    // Recovery runs only when the claim state says some lease ran out (lease_expired):
    // this puts a lease at its instant beside one that ran out, so recovery itself decides.
    const { q, sub } = await queueWithSubscription(db, cred, api);
    await cancelledResults(api, q, 3);
    await waitSequenced(db, cred.namespace_id);
    const early = await connect(node.url, { token: cred.token });
    const late = await connect(node.url, { token: cred.token });
    sockets.push(early, late);
    assert.equal((await early.hello(sub, 1)).type, "events.welcome");
    const a = await early.nextOfType("event.deliver");
    clock.set(clock.now + 1);
    assert.equal((await late.hello(sub, 1)).type, "events.welcome");
    const b = await late.nextOfType("event.deliver");
    assert.equal(Date.parse(b.body.delivery.lease_until), Date.parse(a.body.delivery.lease_until) + 1);
    // a is 1 ms past its lease_until, b at its own.
    clock.set(Date.parse(b.body.delivery.lease_until));
    const again = await early.nextOfType("event.deliver");
    assert.deepEqual([again.body.delivery.id, again.body.delivery.lease_epoch], [a.body.delivery.id, "2"]);
    const from = await claimsRun();
    for (const until = performance.now() + 3000; (await claimsRun()) < from + 3 && performance.now() < until;)
      await sleep(50);
    await stillHeld(late, sub, b);
  });
});

// A call that makes deliveries claimable without a new result — resuming a subscription,
// retrying an EXPIRED delivery — reaches the connections on the node that served it at
// once, not at their next ping or recheck (the lease duration: 30 s here, the default).
// The raw test sockets never ping, so without the wake-up nothing would arrive for 30 s.
import { strict as assert } from "node:assert";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, waitSequenced, type Client } from "../helpers/api.js";
import { cancelledResults, queueWithSubscription } from "../helpers/fixtures.js";
import { connect, type Frame, type TestSocket } from "../helpers/ws.js";
import { request } from "../helpers/http.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Well under the 30 s recheck: only a wake-up delivers this soon. */
const SOON_MS = 5000;

describe("event connections woken by subscription calls", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  let api: Client;
  const open: TestSocket[] = [];

  async function consumer(sub: string, capacity: number): Promise<TestSocket> {
    const s = await connect(node.url, { token: cred.token });
    open.push(s);
    assert.equal((await s.hello(sub, capacity)).type, "events.welcome");
    return s;
  }
  const deliveries = (s: TestSocket) => s.frames.filter((f) => f.type === "event.deliver");
  async function sql(statement: string, params: unknown[]): Promise<any[]> {
    const c = await db.connect();
    try {
      return (await c.query<any[]>(statement, params))[0];
    } finally {
      await c.end();
    }
  }

  before(async () => {
    db = await freshDatabase("ws_wake");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["base"], eventAccess: true });
    node = await startNode(db.url, { ORBIT_LEASE_DURATION_MS: "30000" });
    api = client(node.url, cred.token);
  });
  afterEach(async () => {
    const all = open.splice(0);
    for (const s of all) s.ws.terminate();
    await Promise.all(all.map((s) => s.closed));
  });
  after(async () => {
    await node?.stop();
    await db?.drop();
  });

  it("delivers a resumed subscription's backlog at once; a refused resume delivers nothing", async () => {
    const { q, sub } = await queueWithSubscription(db, cred, api);
    const s = await consumer(sub, 5);
    const cur = (await api.get(`/v1/subscriptions/${sub}`)).json.data;
    const paused = await api.post(`/v1/subscriptions/${sub}:configure`, {
      expected_revision: cur.revision,
      enabled: false,
      reason: "maintenance",
    });
    assert.equal(paused.status, 200, paused.text);
    const tasks = await cancelledResults(api, q, 2);
    await waitSequenced(db, cred.namespace_id);
    // The results woke the connection; its claim found the subscription paused.
    await sleep(500);
    assert.equal(deliveries(s).length, 0, "nothing while paused");
    const stale = await api.post(`/v1/subscriptions/${sub}:configure`, {
      expected_revision: cur.revision,
      enabled: true,
      reason: "back",
    });
    assert.equal(stale.status, 409, stale.text);
    assert.equal(stale.json.error.code, "STATE_CONFLICT");
    await sleep(500);
    assert.equal(deliveries(s).length, 0, "a refused resume resumes nothing");
    const resumed = await api.post(`/v1/subscriptions/${sub}:configure`, {
      expected_revision: paused.json.data.subscription.revision,
      enabled: true,
      reason: "back",
    });
    assert.equal(resumed.status, 200, resumed.text);
    const got = [await s.nextOfType("event.deliver", SOON_MS), await s.nextOfType("event.deliver", SOON_MS)];
    assert.deepEqual(
      got.map((f) => f.body.event.aggregate_id),
      tasks,
    );
  });

  it("re-sends a retried EXPIRED delivery at once; a refused retry re-sends nothing", async () => {
    const { q, sub } = await queueWithSubscription(db, cred, api, { max_attempts: 1 });
    await cancelledResults(api, q, 1);
    const s = await consumer(sub, 3);
    const d = await s.nextOfType("event.deliver");
    // Its lease runs out (set in the database instead of waiting 30 s); the claim that the
    // next result wakes recovers it: its one attempt used, it is EXPIRED.
    await sql("UPDATE deliveries SET lease_until = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND WHERE id = ?", [
      d.body.delivery.id,
    ]);
    await cancelledResults(api, q, 1);
    const e = await s.nextOfType("event.deliver", SOON_MS);
    assert.equal((await s.ack(e)).type, "ack");
    const [row] = await sql("SELECT state, revision FROM deliveries WHERE id = ?", [d.body.delivery.id]);
    assert.equal(row.state, "EXPIRED");
    const path = `/v1/subscriptions/${sub}/deliveries/${d.body.delivery.id}:retry`;
    const stale = await api.post(path, {
      expected_revision: d.body.delivery.revision,
      reason: "repaired",
      additional_attempts: 1,
    });
    assert.equal(stale.status, 409, stale.text);
    await sleep(500);
    assert.equal(deliveries(s).length, 2, "a refused retry re-sends nothing");
    const retried = await api.post(path, {
      expected_revision: String(row.revision),
      reason: "repaired",
      additional_attempts: 1,
    });
    assert.equal(retried.status, 200, retried.text);
    const again = await s.nextOfType("event.deliver", SOON_MS);
    assert.equal(again.body.delivery.id, d.body.delivery.id);
    assert.equal(again.body.delivery.lease_epoch, "2");
  });
});

// The node that serves `:retry` or `:configure` wakes only its own connections; those on
// another node learn at their next ping reply (docs/operations.md "Wake-ups": "connections on other
// nodes claim at their next ping reply … or their periodic recheck"). The recheck is the
// lease duration (30 s here), so only the ping reply delivers within SOON_MS.
describe("event connections on another node, at their next ping", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let a: OrbitNode;
  let b: OrbitNode;
  let cred: BootstrapOutput;
  let api: Client;
  const open: TestSocket[] = [];
  const deliveries = (s: TestSocket) => s.frames.filter((f) => f.type === "event.deliver");
  /** Until the node has no claim running or waiting and has started none for 300 ms. */
  async function claimsSettled(node: OrbitNode): Promise<void> {
    const read = async () => {
      const text = (await request(node.url, { path: "/metrics" })).text;
      const value = (name: string) => Number(new RegExp(`^${name} (\\d+)`, "m").exec(text)?.[1] ?? NaN);
      return {
        count: value("orbit_claim_duration_seconds_count"),
        busy: value("orbit_claims_in_flight") + value("orbit_claims_waiting"),
      };
    };
    for (let last = await read(), end = Date.now() + SOON_MS; ;) {
      await sleep(300);
      const now = await read();
      if (now.busy === 0 && last.busy === 0 && now.count === last.count) return;
      assert.ok(Date.now() < end, "node B's claims settle");
      last = now;
    }
  }

  before(async () => {
    db = await freshDatabase("ws_wake_nodes");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["base"], eventAccess: true });
    [a, b] = await Promise.all([
      startNode(db.url, { ORBIT_LEASE_DURATION_MS: "30000" }),
      startNode(db.url, { ORBIT_LEASE_DURATION_MS: "30000" }),
    ]);
    api = client(a.url, cred.token); // every call on node A, every connection on node B
  });
  afterEach(async () => {
    const all = open.splice(0);
    for (const s of all) s.ws.terminate();
    await Promise.all(all.map((s) => s.closed));
  });
  after(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    await db?.drop();
  });

  it("re-sends a delivery retried on node A to a connection on node B at its next ping", async () => {
    const { q, sub } = await queueWithSubscription(db, cred, api, { max_attempts: 1 });
    await cancelledResults(api, q, 1);
    const s = await connect(b.url, { token: cred.token });
    open.push(s);
    assert.equal((await s.hello(sub, 3)).type, "events.welcome");
    const d = await s.nextOfType("event.deliver");
    // Its lease runs out (in the database, not in 30 s); the next result's claim recovers
    // it to EXPIRED (its one attempt used).
    const c = await db.connect();
    try {
      await c.query("UPDATE deliveries SET lease_until = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND WHERE id = ?", [
        d.body.delivery.id,
      ]);
    } finally {
      await c.end();
    }
    await cancelledResults(api, q, 1);
    const e = await s.nextOfType("event.deliver", SOON_MS);
    assert.equal((await s.ack(e)).type, "ack");
    // The ACK freed room, so the connection claims again at once; a claim that ran after
    // the retry below would rightly lease it (as on a busy machine it may). Only a
    // claim that wakes up later is the ping's signal: wait for node B's claims to settle.
    await claimsSettled(b);
    const detail = (await api.get(`/v1/subscriptions/${sub}/deliveries/${d.body.delivery.id}`)).json.data.delivery;
    assert.equal(detail.state, "EXPIRED");
    const retried = await api.post(`/v1/subscriptions/${sub}/deliveries/${d.body.delivery.id}:retry`, {
      expected_revision: detail.revision,
      reason: "repaired",
      additional_attempts: 1,
    });
    assert.equal(retried.status, 200, retried.text);
    await sleep(500);
    assert.equal(deliveries(s).length, 2, "node B has no signal of the retry before the ping");
    assert.equal((await s.ping()).type, "ack");
    const again = await s.nextOfType("event.deliver", SOON_MS);
    assert.equal(again.body.delivery.id, d.body.delivery.id);
    assert.equal(again.body.delivery.lease_epoch, "2");
  });

  it("delivers the backlog of a subscription resumed on node A to a connection on node B at its next ping", async () => {
    const { q, sub } = await queueWithSubscription(db, cred, api);
    const s = await connect(b.url, { token: cred.token });
    open.push(s);
    assert.equal((await s.hello(sub, 5)).type, "events.welcome");
    const cur = (await api.get(`/v1/subscriptions/${sub}`)).json.data;
    const paused = await api.post(`/v1/subscriptions/${sub}:configure`, {
      expected_revision: cur.revision,
      enabled: false,
      reason: "maintenance",
    });
    assert.equal(paused.status, 200, paused.text);
    const tasks = await cancelledResults(api, q, 2);
    await waitSequenced(db, cred.namespace_id);
    await sleep(500); // node B's head poll woke the connection; its claim found it paused
    assert.equal(deliveries(s).length, 0, "nothing while paused");
    const resumed = await api.post(`/v1/subscriptions/${sub}:configure`, {
      expected_revision: paused.json.data.subscription.revision,
      enabled: true,
      reason: "back",
    });
    assert.equal(resumed.status, 200, resumed.text);
    assert.equal((await s.ping()).body.enabled, true);
    const got = [await s.nextOfType("event.deliver", SOON_MS), await s.nextOfType("event.deliver", SOON_MS)];
    assert.deepEqual(
      got.map((f) => f.body.event.aggregate_id),
      tasks,
    );
  });

  /**
   * Three results; s (node B, capacity 1) holds the first, t (node A, capacity 1) the
   * second, and the client has ACKed s's delivery on t.
   */
  async function firstAckedOnNodeA(): Promise<{ s: TestSocket; first: Frame }> {
    const { q, sub } = await queueWithSubscription(db, cred, api);
    await cancelledResults(api, q, 3);
    const s = await connect(b.url, { token: cred.token });
    open.push(s);
    assert.equal((await s.hello(sub, 1)).type, "events.welcome");
    const first = await s.nextOfType("event.deliver", SOON_MS);
    const t = await connect(a.url, { token: cred.token });
    open.push(t);
    assert.equal((await t.hello(sub, 1)).type, "events.welcome");
    await t.nextOfType("event.deliver", SOON_MS);
    const receipt = await t.ack(first);
    assert.equal(receipt.type, "ack", JSON.stringify(receipt));
    assert.equal(receipt.body.deduplicated, false);
    return { s, first };
  }

  it("frees the slot of a delivery ACKed on node A, for its connection on node B, at its next ping", async () => {
    const { s, first } = await firstAckedOnNodeA();
    await sleep(500);
    assert.equal(deliveries(s).length, 1, "node B has no signal of the ACK before the ping");
    assert.equal((await s.ping()).type, "ack");
    // s has room again: the third result comes to it now, not when the ACKed lease would run out.
    const third = await s.nextOfType("event.deliver", SOON_MS);
    assert.equal(third.body.event.sequence, String(BigInt(first.body.event.sequence) + 2n));
  });

  it("frees the slot of a delivery ACKed on node A when node B's connection sends the same ACK again", async () => {
    const { s, first } = await firstAckedOnNodeA();
    // The client did not see that answer and sends the ACK again on s: no ping needed.
    const replay = await s.ack(first);
    assert.equal(replay.type, "ack", JSON.stringify(replay));
    assert.equal(replay.body.deduplicated, true);
    const third = await s.nextOfType("event.deliver", SOON_MS);
    assert.equal(third.body.event.sequence, String(BigInt(first.body.event.sequence) + 2n));
  });
});

// Delivery and ACK end to end (docs/protocol.md §6) over real WebSocket connections: the lease is
// durable before the frame, ACKs are durable and idempotent across connections, leases
// expire and are re-sent with a new epoch, budgets run out, manual retry re-sends,
// pause and resume, capacity and backlog bounds, and a purged history gap.
import { strict as assert } from "node:assert";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, runCli, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, waitSequenced, type Client } from "../helpers/api.js";
import { cancelledResults, queueWithSubscription } from "../helpers/fixtures.js";
import { connect, mid, type Frame, type TestSocket } from "../helpers/ws.js";

const LEASE_MS = 700;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("event delivery", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  let api: Client;
  const open: TestSocket[] = [];

  const setup = (extra: Record<string, unknown> = {}) => queueWithSubscription(db, cred, api, extra);
  const results = (q: string, n: number) => cancelledResults(api, q, n);
  async function consumer(sub: string, capacity: number): Promise<TestSocket> {
    const s = await connect(node.url, { token: cred.token });
    open.push(s);
    const w = await s.hello(sub, capacity);
    assert.equal(w.type, "events.welcome", JSON.stringify(w));
    return s;
  }
  const deliveries = (s: TestSocket) => s.frames.filter((f) => f.type === "event.deliver");
  /** Once every result of the namespace is numbered, `orbit purge` below `before`. */
  async function purge(owner: BootstrapOutput, namespace: string, before: string): Promise<void> {
    await waitSequenced(db, owner.namespace_id);
    assert.equal(
      (await runCli(["purge", "--namespace", namespace, "--before", before], { ORBIT_DATABASE_URL: db.url })).code,
      0,
    );
  }
  async function row(id: string) {
    const c = await db.connect();
    try {
      return (
        (
          await c.query<any[]>(
            "SELECT state, lease_epoch, attempts, session_id, acknowledged_at FROM deliveries WHERE id = ?",
            [id],
          )
        )[0] as any[]
      )[0];
    } finally {
      await c.end();
    }
  }

  before(async () => {
    db = await freshDatabase("ws_delivery");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["base"], eventAccess: true });
    node = await startNode(db.url, { ORBIT_LEASE_DURATION_MS: String(LEASE_MS) });
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

  it("delivers in sequence order with the lease already durable, and confirms a durable ACK", async () => {
    const { q, sub } = await setup();
    const tasks = await results(q, 3);
    const s = await consumer(sub, 5);
    const got: Frame[] = [];
    for (let i = 0; i < 3; i++) got.push(await s.nextOfType("event.deliver"));
    assert.deepEqual(
      got.map((f) => f.body.event.aggregate_id),
      tasks,
      "in sequence order",
    );
    const seqs = got.map((f) => Number(f.body.event.sequence));
    assert.deepEqual(
      [...seqs].sort((a, b) => a - b),
      seqs,
    );
    const d = got[0]!;
    assert.equal(d.session_id, s.sessionId);
    assert.equal(d.reply_to, undefined);
    assert.equal(d.body.delivery.state, "LEASED");
    assert.equal(d.body.delivery.lease_epoch, "1");
    assert.equal(d.body.delivery.attempts, 1);
    assert.equal(d.body.delivery.event_id, d.body.event.id);
    assert.match(d.body.lease_secret, /^[A-Za-z0-9_-]{43}$/);
    const stored = await row(d.body.delivery.id);
    assert.deepEqual(
      [stored.state, String(stored.lease_epoch), stored.session_id],
      ["LEASED", "1", s.sessionId],
      "persisted before it was sent",
    );
    const a = await s.ack(d);
    assert.equal(a.type, "ack");
    assert.deepEqual(Object.keys(a.body).sort(), [
      "acknowledged_at",
      "deduplicated",
      "delivery_id",
      "epoch",
      "event_id",
    ]);
    assert.equal(a.body.deduplicated, false);
    assert.equal(a.body.event_id, d.body.event.id);
    assert.equal((await row(d.body.delivery.id)).state, "ACKED", "durable when confirmed");
    assert.equal((await api.get(`/v1/subscriptions/${sub}`)).json.data.pending_count, 2);
  });

  it("delivers only the subscription's types, never task.requeued, and moves its cursor past the rest", async () => {
    const { q, sub } = await setup({ types: ["task.succeeded"] });
    const worker = (path: string, body: unknown) => api.post(path, body, null);
    const claimNext = async () => (await worker("/v1/worker/claim", { queue_id: q })).json.data.attempt_id as string;
    const [cancelled] = await results(q, 1);
    const t = (await api.post("/v1/tasks", { queue_id: q, input: 1 })).json.data.task;
    assert.equal(
      (await worker(`/v1/worker/attempts/${await claimNext()}:requeue`, { reason: "shutting down" })).status,
      200,
      "task.requeued",
    );
    assert.equal(
      (await worker(`/v1/worker/attempts/${await claimNext()}:complete`, { outcome: "succeeded" })).status,
      200,
    );
    await results(q, 1);
    await waitSequenced(db, cred.namespace_id);
    const s = await consumer(sub, 5);
    const d = await s.nextOfType("event.deliver");
    assert.equal(d.body.event.type, "task.succeeded");
    assert.equal(d.body.event.aggregate_id, t.id);
    await sleep(300);
    assert.equal(deliveries(s).length, 1, "nothing else matches");
    const view = (await api.get(`/v1/subscriptions/${sub}`)).json.data;
    assert.equal(view.pending_count, 1);
    const c = await db.connect();
    try {
      const [[stream]] = (await c.query("SELECT head_sequence FROM namespace_streams WHERE namespace_id = ?", [
        cred.namespace_id,
      ])) as any;
      assert.equal(
        view.cursor_sequence,
        String(stream.head_sequence),
        "the cursor passed the events it does not deliver",
      );
      const [rows] = await c.query<any[]>("SELECT COUNT(*) AS n FROM deliveries WHERE subscription_id = ?", [sub]);
      assert.equal(Number(rows[0].n), 1, "only the matching event was materialised");
    } finally {
      await c.end();
    }
    assert.notEqual(cancelled, t.id);
  });

  it("answers a re-sent ACK on a new connection with the original acknowledged_at, once", async () => {
    const { q, sub } = await setup();
    await results(q, 1);
    const s1 = await consumer(sub, 1);
    const d = await s1.nextOfType("event.deliver");
    const first = await s1.ack(d);
    s1.ws.terminate();
    await s1.closed;
    const s2 = await consumer(sub, 1);
    assert.notEqual(s2.sessionId, s1.sessionId);
    const again = await s2.ack(d);
    assert.equal(again.type, "ack");
    assert.equal(again.body.deduplicated, true);
    assert.equal(again.body.acknowledged_at, first.body.acknowledged_at);
    assert.equal(again.session_id, s2.sessionId);
    assert.equal((await api.get(`/v1/subscriptions/${sub}`)).json.data.pending_count, 0, "the backlog went down once");
    const c = await db.connect();
    try {
      const [rows] = await c.query<any[]>(
        "SELECT credential_id, subscription_id, details, reason, revision_before, revision_after, created_at FROM audit_records WHERE delivery_id = ? AND action = 'delivery.ack'",
        [d.body.delivery.id],
      );
      assert.equal(rows.length, 1, "one ACK audit record");
      const audit = rows[0];
      assert.deepEqual(
        [
          audit.credential_id,
          audit.subscription_id,
          audit.details,
          audit.reason,
          String(audit.revision_before),
          String(audit.revision_after),
        ],
        [cred.credential_id, sub, '{"epoch":"1","state_before":"LEASED"}', null, "2", "3"],
        "who, what and the revisions it moved",
      );
      assert.equal(new Date(audit.created_at).toISOString(), first.body.acknowledged_at, "recorded at the ACK's time");
    } finally {
      await c.end();
    }
  });

  it("uses message_id only to correlate: two ACKs under one message_id are each taken by their proof, a proof under a new one is deduplicated", async () => {
    // Protocol §5: message_id only correlates; an ACK is deduplicated durably by the
    // delivery id, the epoch and the secret.
    const { q, sub } = await setup();
    await results(q, 2);
    const s = await consumer(sub, 2);
    const a = await s.nextOfType("event.deliver");
    const b = await s.nextOfType("event.deliver");
    const id = mid();
    const ackUnder = (d: Frame) => ({
      protocol_version: "1",
      type: "event.ack",
      message_id: id,
      session_id: s.sessionId,
      body: { delivery_id: d.body.delivery.id, epoch: d.body.delivery.lease_epoch, lease_secret: d.body.lease_secret },
    });
    s.send(ackUnder(a));
    const ra = await s.next((f) => f.reply_to === id);
    s.send(ackUnder(b));
    const rb = await s.next((f) => f.reply_to === id);
    assert.deepEqual(
      [ra.type, ra.body?.delivery_id, ra.body?.deduplicated],
      ["ack", a.body.delivery.id, false],
      JSON.stringify(ra),
    );
    assert.deepEqual(
      [rb.type, rb.body?.delivery_id, rb.body?.deduplicated],
      ["ack", b.body.delivery.id, false],
      `a message_id seen before is no replay: ${JSON.stringify(rb)}`,
    );
    assert.ok(
      ra.message_id !== id && rb.message_id !== id && ra.message_id !== rb.message_id,
      "each answer has a new message_id",
    );
    assert.equal((await row(b.body.delivery.id)).state, "ACKED");
    const again = await s.ack(a);
    assert.deepEqual(
      [again.type, again.body?.deduplicated, again.body?.acknowledged_at],
      ["ack", true, ra.body!.acknowledged_at],
      "the proof, not the message_id, is what dedupes",
    );
    assert.equal((await api.get(`/v1/subscriptions/${sub}`)).json.data.pending_count, 0);
  });

  it("never lets a connection hold more than its capacity, nor materialises past max_pending", async () => {
    const { q, sub } = await setup({ max_pending: 3 });
    await results(q, 6);
    const s = await consumer(sub, 2);
    await s.nextOfType("event.deliver");
    await s.nextOfType("event.deliver");
    await sleep(300);
    assert.equal(deliveries(s).length, 2, "capacity 2");
    const subNow = (await api.get(`/v1/subscriptions/${sub}`)).json.data;
    assert.equal(subNow.pending_count, 3, "max_pending 3 bounds the backlog");
    await s.ack(deliveries(s)[0]!);
    await s.nextOfType("event.deliver");
    await sleep(200);
    assert.equal(deliveries(s).length, 3, "one ACK, one more delivery");
  });

  it("re-sends an expired lease with a new epoch; the old proof is DELIVERY_LEASE_LOST and the connection stays", async () => {
    const { q, sub } = await setup();
    await results(q, 1);
    const s = await consumer(sub, 1);
    const first = await s.nextOfType("event.deliver");
    const second = await s.nextOfType("event.deliver", LEASE_MS * 6);
    assert.equal(second.body.delivery.id, first.body.delivery.id, "the same delivery, re-sent");
    assert.equal(second.body.delivery.lease_epoch, "2");
    assert.equal(second.body.delivery.attempts, 2);
    assert.notEqual(second.body.lease_secret, first.body.lease_secret);
    const lost = await s.ack(first);
    assert.equal(lost.type, "error");
    assert.equal(lost.error!.code, "DELIVERY_LEASE_LOST");
    assert.equal(lost.session_id, s.sessionId);
    const ok = await s.ack(second);
    assert.equal(ok.type, "ack");
    assert.equal(ok.body.epoch, "2");
  });

  it("a full connection whose stale proof is DELIVERY_LEASE_LOST takes new results at once, not at its next recheck", async () => {
    // A lease taken over by another connection no longer counts against this one. The
    // node's own 30 s lease (the default) puts this connection's recheck 30 s away; the
    // lease is run out by moving its deadline into the past, as 30 s would.
    const slow = await startNode(db.url);
    const at = async (sub: string) => {
      const s = await connect(slow.url, { token: cred.token });
      open.push(s);
      assert.equal((await s.hello(sub, 1)).type, "events.welcome");
      return s;
    };
    try {
      const { q, sub } = await setup();
      await results(q, 1);
      const a = await at(sub);
      const first = await a.nextOfType("event.deliver");
      const c = await db.connect();
      try {
        await c.query("UPDATE deliveries SET lease_until = NOW(3) - INTERVAL 1 SECOND WHERE id = ?", [
          first.body.delivery.id,
        ]);
      } finally {
        await c.end();
      }
      const b = await at(sub);
      const taken = await b.nextOfType("event.deliver");
      assert.equal(taken.body.delivery.id, first.body.delivery.id, "recovered by the other connection");
      assert.equal(taken.body.delivery.lease_epoch, "2");
      assert.equal((await a.ack(first)).error!.code, "DELIVERY_LEASE_LOST");
      const [next] = await results(q, 1);
      const got = await a.nextOfType("event.deliver", 5000);
      assert.equal(got.body.event.aggregate_id, next, "the connection that holds nothing any more takes it");
      assert.equal((await a.ack(got)).type, "ack");
      assert.equal((await b.ack(taken)).type, "ack");
    } finally {
      await slow.stop();
    }
  });

  it("accepts a late ACK with the latest proof when no newer epoch replaced it", async () => {
    const { q, sub } = await setup();
    await results(q, 1);
    const s1 = await consumer(sub, 1);
    const d = await s1.nextOfType("event.deliver");
    // Pause: no claim runs, so nothing replaces the lease after it runs out.
    const cur = (await api.get(`/v1/subscriptions/${sub}`)).json.data;
    await api.post(`/v1/subscriptions/${sub}:configure`, {
      expected_revision: cur.revision,
      enabled: false,
      reason: "pause",
    });
    s1.ws.terminate();
    await sleep(LEASE_MS + 300);
    // Protocol §4: while paused nothing recovers the lease, so it still shows LEASED past its
    // deadline; reads change nothing, and a manual retry cannot bypass the state rule
    // (only EXPIRED) because the lease ran out.
    const path = `/v1/subscriptions/${sub}/deliveries/${d.body.delivery.id}`;
    const stale = (await api.get(path)).json.data.delivery;
    assert.equal(stale.state, "LEASED");
    assert.ok(Date.parse(stale.lease_until) < Date.now(), "past its deadline");
    const refused = await api.post(`${path}:retry`, {
      expected_revision: stale.revision,
      reason: "lease ran out",
      additional_attempts: 1,
    });
    assert.equal(refused.status, 409, refused.text);
    assert.equal(refused.json.error.code, "STATE_CONFLICT");
    const listed = (await api.get(`/v1/subscriptions/${sub}/deliveries?state=LEASED`)).json.data.items;
    assert.deepEqual(
      listed.map((x: { id: string }) => x.id),
      [stale.id],
    );
    assert.deepEqual((await api.get(path)).json.data.delivery, stale, "reads and the refused retry changed nothing");
    const s2 = await consumer(sub, 1);
    const late = await s2.ack(d);
    assert.equal(late.type, "ack", JSON.stringify(late));
    assert.equal(late.body.deduplicated, false);
    assert.equal((await row(d.body.delivery.id)).state, "ACKED");
  });

  it("leaves a delivery EXPIRED after its budget; the latest proof still ACKs it; manual retry re-sends it", async () => {
    const { q, sub } = await setup({ max_attempts: 1 });
    await results(q, 2);
    const s = await consumer(sub, 2);
    const a = await s.nextOfType("event.deliver");
    const b = await s.nextOfType("event.deliver");
    await sleep(LEASE_MS * 3);
    assert.equal((await row(a.body.delivery.id)).state, "EXPIRED");
    assert.equal((await row(b.body.delivery.id)).state, "EXPIRED");
    assert.equal(deliveries(s).length, 2, "no re-send beyond the budget");
    // The latest proof ACKs an EXPIRED delivery too.
    const acked = await s.ack(b);
    assert.equal(acked.type, "ack");
    assert.equal((await row(b.body.delivery.id)).state, "ACKED");
    const detail = (await api.get(`/v1/subscriptions/${sub}/deliveries/${a.body.delivery.id}`)).json.data.delivery;
    const retry = await api.post(`/v1/subscriptions/${sub}/deliveries/${a.body.delivery.id}:retry`, {
      expected_revision: detail.revision,
      reason: "receiver repaired",
      additional_attempts: 1,
    });
    assert.equal(retry.status, 200, retry.text);
    const again = await s.nextOfType("event.deliver", LEASE_MS * 4);
    assert.equal(again.body.delivery.id, a.body.delivery.id);
    assert.equal(again.body.delivery.lease_epoch, "2");
    assert.equal(again.body.delivery.attempt_budget, 2);
    assert.equal((await s.ack(again)).type, "ack");
  });

  it("delivers nothing while paused but takes ACKs; resumes on resume", async () => {
    const { q, sub } = await setup();
    await results(q, 1);
    const s = await consumer(sub, 3);
    const d = await s.nextOfType("event.deliver");
    const cur = (await api.get(`/v1/subscriptions/${sub}`)).json.data;
    const paused = await api.post(`/v1/subscriptions/${sub}:configure`, {
      expected_revision: cur.revision,
      enabled: false,
      reason: "maintenance",
    });
    assert.equal(paused.status, 200);
    await results(q, 2);
    await sleep(800);
    assert.equal(deliveries(s).length, 1, "nothing new while paused");
    assert.equal(
      (await api.get(`/v1/subscriptions/${sub}`)).json.data.cursor_sequence,
      cur.cursor_sequence,
      "nothing materialised while paused",
    );
    assert.equal((await s.ack(d)).type, "ack", "ACKs still work");
    assert.equal((await s.ping()).body.enabled, false);
    await api.post(`/v1/subscriptions/${sub}:configure`, {
      expected_revision: paused.json.data.subscription.revision,
      enabled: true,
      reason: "back",
    });
    await s.nextOfType("event.deliver", 5000);
    await s.nextOfType("event.deliver", 5000);
  });

  it("keeps other subscriptions' deliveries out of reach: their proofs are DELIVERY_LEASE_LOST", async () => {
    const one = await setup();
    const two = await setup();
    await results(one.q, 1);
    const s1 = await consumer(one.sub, 1);
    const d = await s1.nextOfType("event.deliver");
    const s2 = await consumer(two.sub, 1);
    const e = await s2.ack(d);
    assert.equal(e.error!.code, "DELIVERY_LEASE_LOST");
    assert.equal((await row(d.body.delivery.id)).state, "LEASED", "untouched");
    const wrongSecret = await s1.ack({ delivery_id: d.body.delivery.id, epoch: "1", lease_secret: "A".repeat(43) });
    assert.equal(wrongSecret.error!.code, "DELIVERY_LEASE_LOST");
    const wrongEpoch = await s1.ack({ delivery_id: d.body.delivery.id, epoch: "2", lease_secret: d.body.lease_secret });
    assert.equal(wrongEpoch.error!.code, "DELIVERY_LEASE_LOST");
    assert.equal((await s1.ack(d)).type, "ack", "the connection stayed open");
  });

  it("reports a purged history gap with EVENT_HISTORY_EXPIRED and closes; it never skips ahead", async () => {
    const other = await bootstrap(db.url, { namespace: "gap", application: "app", queues: ["q"], eventAccess: true });
    const api2 = client(node.url, other.token);
    const q = other.queues[0]!.id;
    const sub = (await api2.post("/v1/subscriptions", { name: "gap", queue_id: q, max_pending: 1 })).json.data
      .subscription.id;
    await cancelledResults(api2, q, 3);
    await purge(other, "gap", "3");
    const s = await connect(node.url, { token: other.token });
    open.push(s);
    await s.hello(sub, 1);
    const e = await s.nextOfType("error");
    assert.equal(e.error!.code, "EVENT_HISTORY_EXPIRED");
    assert.equal(e.reply_to, undefined, "found by background claiming");
    assert.equal(e.session_id, s.sessionId);
    assert.equal((await s.closed).code, 1008);
    assert.equal(deliveries(s).length, 0);
    assert.equal(
      (await api2.get(`/v1/subscriptions/${sub}`)).json.data.cursor_sequence,
      "0",
      "the cursor did not jump",
    );
  });

  it("costs a subscription nothing when a purge takes only events it would not receive: its cursor moves past them", async () => {
    const other = await bootstrap(db.url, {
      namespace: "gap-other",
      application: "app",
      queues: ["a", "b"],
      eventAccess: true,
    });
    const api2 = client(node.url, other.token);
    const [a, b] = other.queues.map((x) => x.id) as [string, string];
    const create = async (name: string, queue: string, types?: string[]) =>
      (await api2.post("/v1/subscriptions", { name, queue_id: queue, ...(types ? { types } : {}) })).json.data
        .subscription.id as string;
    const onA = await create("on-a", a);
    const succeededOnB = await create("succeeded-on-b", b, ["task.succeeded"]);
    const allOnB = await create("all-on-b", b);
    await cancelledResults(api2, b, 2); // sequences 1 and 2, cancelled, on b
    await purge(other, "gap-other", "3");
    const cursor = async (sub: string) => (await api2.get(`/v1/subscriptions/${sub}`)).json.data.cursor_sequence;
    assert.deepEqual(
      [await cursor(onA), await cursor(succeededOnB), await cursor(allOnB)],
      ["2", "2", "0"],
      "only all-on-b lost events",
    );
    const [task] = await cancelledResults(api2, a, 1); // sequence 3, on a
    const s = await connect(node.url, { token: other.token });
    open.push(s);
    await s.hello(onA, 1);
    const d = await s.nextOfType("event.deliver", 5000);
    assert.deepEqual([d.body.event.aggregate_id, d.body.event.sequence], [task, "3"]);
    const quiet = await connect(node.url, { token: other.token });
    open.push(quiet);
    await quiet.hello(succeededOnB, 1);
    await sleep(3 * LEASE_MS);
    assert.equal((await quiet.ping()).type, "ack", "still open");
    const lost = await connect(node.url, { token: other.token });
    open.push(lost);
    await lost.hello(allOnB, 1);
    assert.equal((await lost.nextOfType("error", 5000)).error!.code, "EVENT_HISTORY_EXPIRED");
    assert.equal(await cursor(allOnB), "0", "the cursor did not jump");
  });

  it("purges only when no claim of the namespace is in flight: a claim never materialises after the boundary moved under it", async () => {
    const other = await bootstrap(db.url, {
      namespace: "gap-race",
      application: "app",
      queues: ["q"],
      eventAccess: true,
    });
    const api2 = client(node.url, other.token);
    const sub = (await api2.post("/v1/subscriptions", { name: "race", queue_id: other.queues[0]!.id })).json.data
      .subscription.id;
    await cancelledResults(api2, other.queues[0]!.id, 2);
    await waitSequenced(db, other.namespace_id);
    const boundary = async () => {
      const c = await db.connect();
      try {
        const [[r]] = (await c.query("SELECT retention_boundary FROM namespace_streams WHERE namespace_id = ?", [
          other.namespace_id,
        ])) as any;
        return String(r.retention_boundary);
      } finally {
        await c.end();
      }
    };
    // A claim's lock on the subscription row, held as a claim holds it.
    const claimLike = await db.connect();
    try {
      await claimLike.query("START TRANSACTION");
      await claimLike.query("SELECT id FROM subscriptions WHERE id = ? FOR UPDATE", [sub]);
      const purging = runCli(["purge", "--namespace", "gap-race", "--before", "3"], { ORBIT_DATABASE_URL: db.url });
      await sleep(1000);
      assert.equal(await boundary(), "0", "the purge waits for the claim");
      await claimLike.query("COMMIT");
      assert.equal((await purging).code, 0);
    } finally {
      await claimLike.end();
    }
    assert.equal(await boundary(), "2");
  });

  it("keeps a paused subscription's connection though its history was purged, and reports the gap once it is enabled", async () => {
    const other = await bootstrap(db.url, {
      namespace: "gap-paused",
      application: "app",
      queues: ["q"],
      eventAccess: true,
    });
    const api2 = client(node.url, other.token);
    const q = other.queues[0]!.id;
    const sub = (await api2.post("/v1/subscriptions", { name: "gap", queue_id: q, max_pending: 1 })).json.data
      .subscription.id;
    const paused = await api2.post(`/v1/subscriptions/${sub}:configure`, {
      expected_revision: "1",
      enabled: false,
      reason: "maintenance",
    });
    assert.equal(paused.status, 200);
    await cancelledResults(api2, q, 3);
    await purge(other, "gap-paused", "3");
    const s = await connect(node.url, { token: other.token });
    open.push(s);
    assert.equal((await s.hello(sub, 1)).type, "events.welcome");
    // The claim after hello and the periodic ones (every lease, 700 ms) find it paused.
    await sleep(3 * LEASE_MS);
    assert.equal((await s.ping()).body.enabled, false);
    assert.deepEqual(
      s.frames.filter((f) => f.type === "error"),
      [],
      "no error while paused",
    );
    await api2.post(`/v1/subscriptions/${sub}:configure`, {
      expected_revision: paused.json.data.subscription.revision,
      enabled: true,
      reason: "back",
    });
    const e = await s.nextOfType("error", 5000);
    assert.equal(e.error!.code, "EVENT_HISTORY_EXPIRED");
    assert.equal((await s.closed).code, 1008);
    assert.equal(
      (await api2.get(`/v1/subscriptions/${sub}`)).json.data.cursor_sequence,
      "0",
      "the cursor did not jump",
    );
  });

  it("delivers what it materialised before a purged gap — those events are kept for it — then reports the gap", async () => {
    const other = await bootstrap(db.url, {
      namespace: "gap-owed",
      application: "app",
      queues: ["q"],
      eventAccess: true,
    });
    const api2 = client(node.url, other.token);
    const q = other.queues[0]!.id;
    const sub = (await api2.post("/v1/subscriptions", { name: "owed", queue_id: q, max_pending: 3 })).json.data
      .subscription.id;
    const tasks = await cancelledResults(api2, q, 4);
    await waitSequenced(db, other.namespace_id);
    // The first claim materialises 3 (max_pending) and leases the first to a consumer that
    // then dies; the fourth stays in the log (the backlog is full) and is purged.
    const s1 = await connect(node.url, { token: other.token });
    open.push(s1);
    await s1.hello(sub, 1);
    const first = await s1.nextOfType("event.deliver");
    s1.ws.terminate();
    await s1.closed;
    await purge(other, "gap-owed", "5");
    assert.equal((await api2.get(`/v1/subscriptions/${sub}`)).json.data.cursor_sequence, "3");
    // Owed before the gap: two PENDING deliveries and the dead consumer's lease, whose
    // events retention kept. A new consumer gets all three (the lease once it ran out, with
    // a new epoch) and ACKs them; only then, with nothing owed before the gap, is it reported.
    const s2 = await connect(node.url, { token: other.token });
    open.push(s2);
    await s2.hello(sub, 3);
    const got: Frame[] = [];
    for (;;) {
      const f = await s2.next((x) => x.type === "event.deliver" || x.type === "error", 5000);
      if (f.type === "error") {
        assert.equal(f.error!.code, "EVENT_HISTORY_EXPIRED");
        break;
      }
      got.push(f);
      assert.equal((await s2.ack(f)).type, "ack");
    }
    assert.equal((await s2.closed).code, 1008);
    assert.deepEqual(
      got.map((f) => f.body.event.aggregate_id).sort(),
      tasks.slice(0, 3).sort(),
      "everything owed before the gap, nothing past it",
    );
    const resent = got.find((f) => f.body.delivery.id === first.body.delivery.id)!;
    assert.equal(resent.body.delivery.lease_epoch, "2");
    const s = (await api2.get(`/v1/subscriptions/${sub}`)).json.data;
    assert.equal(s.cursor_sequence, "3", "the cursor did not jump");
    assert.equal(s.pending_count, 0);
  });
});

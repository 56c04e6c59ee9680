// Each of the engine's commits whose statements ran in the database while its answer never
// reached the node (the proxy holds the answer back, then drops that connection, or the
// node is SIGKILLed): the client is told nothing it cannot rely on, and what the database
// did is found again — a lease is redelivered at the next epoch, an ACK or a configure is
// a deduplicated replay, a claim cut before its COMMIT leaves neither cursor nor rows.
// The random cuts of boundaries.test.ts may or may not land here; these do, every run.
import { strict as assert } from "node:assert";
import { freshDatabase, MYSQL_PORT, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client } from "../helpers/api.js";
import { cancelledResults, queueWithSubscription } from "../helpers/fixtures.js";
import { startProxy, type Proxy } from "../helpers/proxy.js";
import { connect, type TestSocket } from "../helpers/ws.js";
import { assertError } from "../helpers/contract.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const env = { ORBIT_LEASE_DURATION_MS: "1000" };

async function until(what: string, done: () => Promise<boolean>, ms = 10000): Promise<void> {
  for (const end = Date.now() + ms; !(await done()); await sleep(20)) assert.ok(Date.now() < end, `timed out: ${what}`);
}

describe("commits whose answer was lost", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let cred: BootstrapOutput;
  let proxy: Proxy | undefined;
  const nodes: OrbitNode[] = [];
  const sockets: TestSocket[] = [];

  before(async () => {
    db = await freshDatabase("faults_lost_answers");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["base"], eventAccess: true });
  });
  afterEach(async () => {
    for (const s of sockets.splice(0)) s.ws.terminate();
    proxy?.release();
    await Promise.all(nodes.splice(0).map((n) => n.stop("SIGKILL")));
    await proxy?.close();
    proxy = undefined;
  });
  after(async () => {
    await db?.drop();
  });

  async function nodeViaProxy(extra: Record<string, string> = {}): Promise<OrbitNode> {
    proxy = await startProxy(MYSQL_PORT);
    const node = await startNode(db.urlVia(proxy), { ...env, ...extra });
    nodes.push(node);
    return node;
  }

  async function consumer(url: string, sub: string): Promise<TestSocket> {
    const s = await connect(url, { token: cred.token });
    sockets.push(s);
    assert.equal((await s.hello(sub, 1)).type, "events.welcome");
    return s;
  }

  const ackAudits = async (deliveryId: string) =>
    Number(
      (
        await db.query("SELECT COUNT(*) AS n FROM audit_records WHERE delivery_id = ? AND action = 'delivery.ack'", [
          deliveryId,
        ])
      )[0].n,
    );

  for (const how of ["cut", "SIGKILL"] as const) {
    it(`sends no frame for a lease whose COMMIT ran unanswered (${how}); it is delivered at epoch 2 once it runs out`, async () => {
      const node = await nodeViaProxy();
      const api = client(node.url, cred.token);
      const { q, sub } = await queueWithSubscription(db, cred, api, { from_sequence: null });
      const s = await consumer(node.url, sub);
      proxy!.stallWhen("SET state = 'LEASED'");
      await cancelledResults(api, q, 1);
      const row = async () =>
        (await db.query("SELECT id, state, lease_epoch, attempts FROM deliveries WHERE subscription_id = ?", [sub]))[0];
      await until("the lease committed", async () => proxy!.stalled && (await row())?.state === "LEASED");
      const leased = await row();
      assert.deepEqual([String(leased.lease_epoch), Number(leased.attempts)], ["1", 1]);
      let url = node.url;
      if (how === "cut") {
        proxy!.cutStalled();
        assert.equal((await s.closed).code, 1013, "the claim failed: UNAVAILABLE, reconnect");
      } else {
        await node.stop("SIGKILL");
        await s.closed;
        const again = await startNode(db.url, env);
        nodes.push(again);
        url = again.url;
      }
      assert.equal(
        s.frames.filter((f) => f.type === "event.deliver").length,
        0,
        "no frame for a lease the node never saw committed",
      );
      await sleep(1200); // the 1 s lease runs out
      const s2 = await consumer(url, sub);
      const d = await s2.nextOfType("event.deliver", 10000);
      assert.equal(d.body.delivery.id, leased.id);
      assert.equal(d.body.delivery.lease_epoch, "2");
      assert.equal(d.body.delivery.attempts, 2);
      const receipt = await s2.ack(d);
      assert.equal(receipt.type, "ack", JSON.stringify(receipt));
      assert.equal(receipt.body.deduplicated, false);
      assert.equal(await ackAudits(leased.id), 1);
    });
  }

  it("confirms no ACK whose COMMIT ran unanswered; the proof sent again is a deduplicated ACK with the original time", async () => {
    const node = await nodeViaProxy();
    const api = client(node.url, cred.token);
    const { q, sub } = await queueWithSubscription(db, cred, api, { from_sequence: null });
    const s = await consumer(node.url, sub);
    await cancelledResults(api, q, 1);
    const d = await s.nextOfType("event.deliver");
    const id = d.body.delivery.id as string;
    // The ACK's second round trip: the ACKED mark, its audit record and COMMIT.
    proxy!.stallWhen("INSERT INTO audit_records");
    const reply = s.ack(d).catch(() => undefined);
    const state = async () => (await db.query("SELECT state, acknowledged_at FROM deliveries WHERE id = ?", [id]))[0];
    await until("the ACK committed", async () => proxy!.stalled && (await state())?.state === "ACKED");
    proxy!.cutStalled();
    const got = await Promise.race([reply, s.closed.then(() => undefined)]);
    assert.notEqual(got?.type, "ack", "no receipt from a node that did not see its COMMIT answered");
    const { acknowledged_at } = await state();
    const s2 = await consumer(node.url, sub);
    const again = await s2.ack(d);
    assert.equal(again.type, "ack", JSON.stringify(again));
    assert.equal(again.body.deduplicated, true);
    assert.equal(new Date(again.body.acknowledged_at).toISOString(), (acknowledged_at as Date).toISOString());
    assert.equal(await ackAudits(id), 1, "one audit record");
    assert.equal((await api.get(`/v1/subscriptions/${sub}`)).json.data.pending_count, 0);
  });

  it("leaves neither the cursor's move nor a delivery row of a claim cut after materialising, before its COMMIT", async () => {
    const node = await nodeViaProxy();
    const api = client(node.url, cred.token);
    const { q, sub } = await queueWithSubscription(db, cred, api, { from_sequence: null });
    const cursor = async () =>
      String((await db.query("SELECT cursor_sequence FROM subscriptions WHERE id = ?", [sub]))[0].cursor_sequence);
    const rows = async () =>
      Number((await db.query("SELECT COUNT(*) AS n FROM deliveries WHERE subscription_id = ?", [sub]))[0].n);
    const before = await cursor();
    const s = await consumer(node.url, sub);
    proxy!.stallWhen("INSERT INTO deliveries");
    await cancelledResults(api, q, 1);
    await until("the claim materialised", async () => proxy!.stalled);
    proxy!.cutStalled();
    assert.equal((await s.closed).code, 1013);
    // The cut connection's transaction rolls back when MariaDB sees it gone.
    await until("rolled back", async () => (await rows()) === 0 && (await cursor()) === before);
    const s2 = await consumer(node.url, sub);
    const d = await s2.nextOfType("event.deliver", 10000);
    assert.equal(d.body.delivery.lease_epoch, "1", "materialised once, by the next claim");
    assert.equal((await s2.ack(d)).type, "ack");
    assert.equal(await rows(), 1);
  });

  it("answers 503 for a configure whose COMMIT ran unanswered; the same key then replays its receipt, audited once", async () => {
    const node = await nodeViaProxy({ ORBIT_REQUEST_TIMEOUT_MS: "3000" });
    const api = client(node.url, cred.token);
    const { sub } = await queueWithSubscription(db, cred, api);
    // The receipt is written with the COMMIT, in the transaction's last round trip.
    proxy!.stallWhen("UPDATE idempotency_keys SET response_status");
    const body = { expected_revision: "1", enabled: false, reason: "pause" };
    const first = api.post(`/v1/subscriptions/${sub}:configure`, body, "pause-1");
    const revision = async () =>
      String((await db.query("SELECT revision FROM subscriptions WHERE id = ?", [sub]))[0].revision);
    await until("the configure committed", async () => proxy!.stalled && (await revision()) === "2");
    proxy!.cutStalled();
    assertError(await first, 503, "UNAVAILABLE");
    const replay = await api.post(`/v1/subscriptions/${sub}:configure`, body, "pause-1");
    assert.equal(replay.status, 200, replay.text);
    assert.equal(replay.json.data.deduplicated, true);
    assert.equal(replay.json.data.subscription.revision, "2");
    assert.equal(replay.json.data.subscription.enabled, false);
    const [a] = await db.query(
      "SELECT COUNT(*) AS n FROM audit_records WHERE subscription_id = ? AND action = 'subscription.configure'",
      [sub],
    );
    assert.equal(Number(a.n), 1);
  });
});

// The event SDK against a real node: EventConnection (typed deliveries, ACK receipts and
// errors) and the automatic Consumer (ACK after the handler, reconnect and ACK re-send,
// DELIVERY_LEASE_LOST, stop-and-report codes, the bounded drain).
import { strict as assert } from "node:assert";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, runCli, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, makeCredential, waitSequenced, type Client } from "../helpers/api.js";
import { cancelledResults, queueWithSubscription } from "../helpers/fixtures.js";
import { startProxy } from "../helpers/proxy.js";
import { inspect } from "node:util";
import {
  Consumer,
  EventConnection,
  OrbitClient,
  OrbitEventError,
  type AckReceipt,
  type Delivery,
  type Proof,
} from "../../src/sdk/index.js";

const LEASE_MS = 800;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("event SDK", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  let api: Client;

  const setup = (extra: Record<string, unknown> = {}) => queueWithSubscription(db, cred, api, extra);
  const results = (q: string, n: number) => cancelledResults(api, q, n);
  async function states(sub: string): Promise<Record<string, number>> {
    const c = await db.connect();
    try {
      const [rows] = await c.query<any[]>(
        "SELECT state, COUNT(*) AS n FROM deliveries WHERE subscription_id = ? GROUP BY state",
        [sub],
      );
      return Object.fromEntries(rows.map((r) => [r.state, Number(r.n)]));
    } finally {
      await c.end();
    }
  }
  async function until(cond: () => Promise<boolean> | boolean, ms = 15000): Promise<void> {
    for (const end = Date.now() + ms; !(await cond());) {
      assert.ok(Date.now() < end, "condition not reached in time");
      await sleep(50);
    }
  }

  before(async () => {
    db = await freshDatabase("sdk_consumer");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["base"], eventAccess: true });
    node = await startNode(db.url, { ORBIT_LEASE_DURATION_MS: String(LEASE_MS) });
    api = client(node.url, cred.token);
  });
  after(async () => {
    await node?.stop();
    await db?.drop();
  });

  describe("EventConnection", () => {
    it("keeps an idle connection open with its heartbeat; without one the node closes it at the idle timeout", async function () {
      this.timeout(40000);
      // A node whose idle timeout is below the protocol's 15 s heartbeat announces a quarter
      // of it: the SDK pings as told and is never cut, a connection that sends nothing is.
      const idleNode = await startNode(db.url, { ORBIT_IDLE_TIMEOUT_MS: "2000" });
      try {
        const { sub } = await setup();
        const open = (heartbeat: boolean) =>
          EventConnection.open({
            baseUrl: idleNode.url,
            token: cred.token,
            subscriptionId: sub,
            capacity: 1,
            heartbeat,
          });
        const [pinging, silent] = await Promise.all([open(true), open(false)]);
        assert.equal(pinging.welcome.heartbeat_interval_ms, 500);
        const silentClosed = new Promise<{ code: number }>((r) => silent.once("close", r));
        await sleep(5000);
        assert.equal((await silentClosed).code, 1008, "the silent one was closed for idleness");
        assert.ok(pinging.isOpen, "the pinging one is still open");
        await pinging.close();
      } finally {
        await idleNode.stop();
      }
    });

    it("closes a connection whose ping goes unanswered, so that a consumer reconnects instead of waiting forever", async function () {
      this.timeout(40000);
      const { sub } = await setup();
      const proxy = await startProxy(node.port);
      try {
        const conn = await EventConnection.open({
          baseUrl: proxy.url,
          token: cred.token,
          subscriptionId: sub,
          capacity: 1,
          pingTimeoutMs: 1000,
        });
        proxy.hold(); // the path to the client goes silent: no FIN, no answers (a dead NAT entry, a frozen peer)
        const started = Date.now();
        const closed = await Promise.race([conn.closed, sleep(25000).then(() => undefined)]);
        assert.ok(closed, "closed after the first unanswered ping");
        assert.equal(closed.code, 1006);
        assert.ok(Date.now() - started < conn.welcome.heartbeat_interval_ms + 3000);
      } finally {
        proxy.release();
        await proxy.close();
      }
    });

    it("bounds ack() and ping() without a heartbeat: unanswered, they reject and the socket is dropped", async function () {
      this.timeout(40000);
      const { q, sub } = await setup();
      await results(q, 1);
      const proxy = await startProxy(node.port);
      const open = () =>
        EventConnection.open({
          baseUrl: proxy.url,
          token: cred.token,
          subscriptionId: sub,
          capacity: 1,
          heartbeat: false,
          ackTimeoutMs: 800,
          pingTimeoutMs: 800,
        });
      // Within 5 s or not at all: without a deadline they would wait for ever.
      const settled = (p: Promise<unknown>) =>
        Promise.race([
          p.then(
            () => "answered",
            (e: unknown) => e,
          ),
          sleep(5000).then(() => "still waiting"),
        ]);
      const isClosedError = (e: unknown, text: string) =>
        e instanceof OrbitEventError && e.code === "CONNECTION_CLOSED" && e.message.includes(text);
      try {
        const conn = await open();
        const d = await new Promise<Delivery>((r) => conn.once("delivery", r));
        proxy.hold(); // the ACK reaches the node; its answer never reaches the SDK
        const started = Date.now();
        const acked = await settled(conn.ack(d.proof));
        assert.ok(isClosedError(acked, "no answer to event.ack within 800 ms"), String(acked));
        assert.ok(Date.now() - started < 3000);
        assert.equal((await conn.closed).code, 1006, "the socket was dropped");
        assert.equal(conn.isOpen, false);
        await assert.rejects(conn.ack(d.proof), (e: unknown) => isClosedError(e, "the connection is closed"));
        proxy.release();
        // The ACK landed: the proof kept and sent again on a new connection is a replay.
        const again = await open();
        assert.equal((await again.ack(d.proof)).deduplicated, true);
        proxy.hold();
        const pinged = await settled(again.ping());
        assert.ok(isClosedError(pinged, "no answer to events.ping within 800 ms"), String(pinged));
        assert.equal((await again.closed).code, 1006);
      } finally {
        proxy.release();
        await proxy.close();
      }
    });

    it("opens with hello, surfaces typed deliveries, ACKs with receipts and typed errors", async () => {
      const { q, sub } = await setup();
      await results(q, 1);
      const conn = await EventConnection.open({
        baseUrl: node.url,
        token: cred.token,
        subscriptionId: sub,
        capacity: 1,
      });
      assert.equal(conn.welcome.subscription_id, sub);
      assert.equal(conn.welcome.capacity, 1);
      const d = await new Promise<Delivery>((r) => conn.once("delivery", r));
      assert.equal(d.delivery.state, "LEASED");
      assert.equal(d.event.id, d.delivery.event_id);
      assert.deepEqual(Object.keys(d.proof).sort(), ["delivery_id", "epoch", "lease_secret"]);
      const receipt = await conn.ack(d.proof);
      assert.equal(receipt.deduplicated, false);
      assert.equal((await conn.ack(d.proof)).deduplicated, true);
      await assert.rejects(
        conn.ack({ ...d.proof, epoch: "9" }),
        (e: unknown) => e instanceof OrbitEventError && e.code === "DELIVERY_LEASE_LOST",
      );
      const pong = await conn.ping();
      assert.equal(pong.enabled, true);
      const closed = await conn.close();
      assert.equal(closed.code, 1000);
      await assert.rejects(
        conn.ack(d.proof),
        (e: unknown) => e instanceof OrbitEventError && e.code === "CONNECTION_CLOSED",
      );
    });

    it("rejects a refused upgrade or hello with the protocol's code", async () => {
      const { sub } = await setup();
      await assert.rejects(
        EventConnection.open({
          baseUrl: node.url,
          token: `orbit_${"0".repeat(32)}_${"A".repeat(43)}`,
          subscriptionId: sub,
          capacity: 1,
        }),
        (e: unknown) => e instanceof OrbitEventError && e.code === "UNAUTHENTICATED" && e.status === 401,
      );
      await assert.rejects(
        EventConnection.open({ baseUrl: node.url, token: cred.token, subscriptionId: "0".repeat(32), capacity: 1 }),
        (e: unknown) => e instanceof OrbitEventError && e.code === "NOT_FOUND",
      );
    });
  });

  describe("Consumer", () => {
    it("ACKs every delivery only after its handler resolved, and reports each receipt to onAck", async () => {
      const { q, sub } = await setup();
      await results(q, 20);
      const handled: string[] = [];
      const receipts: AckReceipt[] = [];
      const c = new Consumer({
        baseUrl: node.url,
        token: cred.token,
        subscriptionId: sub,
        capacity: 4,
        handler: async (event, delivery) => {
          // At the moment the handler runs, its delivery is not ACKED yet.
          const row = (await api.get(`/v1/subscriptions/${sub}/deliveries/${delivery.id}`)).json.data.delivery;
          assert.equal(row.state, "LEASED");
          handled.push(event.id);
        },
        onAck: (receipt) => receipts.push(receipt),
      }).start();
      await until(async () => (await states(sub)).ACKED === 20);
      assert.equal(new Set(handled).size, 20);
      await until(() => receipts.length === 20);
      assert.deepEqual(new Set(receipts.map((r) => r.event_id)), new Set(handled));
      assert.ok(receipts.every((r) => !r.deduplicated));
      const stopped = await c.stop({ deadlineMs: 1000 });
      assert.deepEqual(stopped, { stopped: true });
    });

    it("never ACKs a delivery whose handler failed: it comes back after its lease", async () => {
      const { q, sub } = await setup();
      await results(q, 1);
      let calls = 0;
      const errors: unknown[] = [];
      const c = new Consumer({
        baseUrl: node.url,
        token: cred.token,
        subscriptionId: sub,
        capacity: 1,
        onError: (e) => errors.push(e),
        handler: async () => {
          calls++;
          if (calls === 1) throw new Error("receiver's database is down");
        },
      }).start();
      await until(async () => (await states(sub)).ACKED === 1);
      assert.equal(calls, 2, "redelivered after the lease ran out, then handled");
      assert.ok(errors.some((e) => e instanceof Error && /database is down/.test(e.message)));
      await c.stop();
    });

    it("treats a handler that throws instead of rejecting as a failure too: no crash, no ACK, redelivered", async () => {
      const { q, sub } = await setup();
      await results(q, 1);
      let calls = 0;
      const errors: unknown[] = [];
      const c = new Consumer({
        baseUrl: node.url,
        token: cred.token,
        subscriptionId: sub,
        capacity: 1,
        onError: (e) => errors.push(e),
        // Not async: the first call throws before any promise exists.
        handler: (): Promise<void> => {
          calls++;
          if (calls === 1) throw new Error("thrown, not rejected");
          return Promise.resolve();
        },
      }).start();
      await until(async () => (await states(sub)).ACKED === 1);
      assert.equal(calls, 2);
      assert.ok(errors.some((e) => e instanceof Error && /thrown, not rejected/.test(e.message)));
      await c.stop();
    });

    it("reconnects after a lost ACK answer and re-sends the ACK on the new connection", async () => {
      const { q, sub } = await setup();
      const receipts: AckReceipt[] = [];
      const proxy = await startProxy(node.port);
      try {
        const c = new Consumer({
          baseUrl: proxy.url,
          token: cred.token,
          subscriptionId: sub,
          capacity: 1,
          backoff: { initialMs: 50 },
          handler: async () => {
            proxy.dropResponses(1); // the answer to the ACK that follows is lost with its connection
          },
          onAck: (receipt) => receipts.push(receipt),
        }).start();
        await sleep(300);
        await results(q, 1);
        await until(async () => (await states(sub)).ACKED === 1);
        await until(() => c.pendingAcks === 0);
        assert.ok(proxy.dropped >= 1, "an answer was lost");
        const audits = await db.connect();
        try {
          const [rows] = await audits.query<any[]>(
            "SELECT COUNT(*) AS n FROM audit_records WHERE subscription_id = ? AND action = 'delivery.ack'",
            [sub],
          );
          assert.equal(Number(rows[0].n), 1, "ACKed once, confirmed by the re-send");
          // onAck heard of it once: from the receipt that came, not from the lost answer.
          assert.equal(receipts.length, 1);
        } finally {
          await audits.end();
        }
        await c.stop();
      } finally {
        await proxy.close();
      }
    });

    it("drops a proof replaced by a newer lease and ACKs the redelivery", async () => {
      const { q, sub } = await setup();
      await results(q, 1);
      const epochs: string[] = [];
      const lost: unknown[] = [];
      const c = new Consumer({
        baseUrl: node.url,
        token: cred.token,
        subscriptionId: sub,
        capacity: 1,
        onError: (e) => lost.push(e),
        handler: async (_event, delivery) => {
          epochs.push(delivery.lease_epoch);
          if (delivery.lease_epoch === "1") await sleep(LEASE_MS * 3); // outlives its lease
        },
      }).start();
      await until(async () => (await states(sub)).ACKED === 1);
      await until(() => c.pendingAcks === 0 && epochs.length >= 2);
      // At least once: the slow first attempt, then the redelivery — which, with capacity
      // 1, may itself wait behind the slow handler past its lease and come again (a lease
      // that ran out no longer counts as held, so it is re-sent at once): each under the
      // next epoch, and only the latest proof is taken.
      assert.deepEqual(
        epochs,
        epochs.map((_, i) => String(i + 1)),
        "each delivery under the next epoch, from 1",
      );
      const c2 = await db.connect();
      try {
        const [rows] = await c2.query<any[]>(
          "SELECT lease_epoch FROM deliveries WHERE subscription_id = ? AND state = 'ACKED'",
          [sub],
        );
        assert.equal(String(rows[0].lease_epoch), epochs.at(-1), "ACKED by the proof of the last lease");
      } finally {
        await c2.end();
      }
      assert.ok(
        lost.some((e) => e instanceof OrbitEventError && e.code === "DELIVERY_LEASE_LOST"),
        "the replaced proof is reported: a handler slower than the lease spends attempts",
      );
      await c.stop({ deadlineMs: 100 });
    });

    it("keeps the newest lease's proof when the handler that outlived its lease finishes after the redelivery's, and ACKs with it", async () => {
      const { q, sub } = await setup();
      const proxy = await startProxy(node.port);
      try {
        let releaseFirst!: () => void;
        const first = new Promise<void>((r) => (releaseFirst = r));
        const epochs: string[] = [];
        const c = new Consumer({
          baseUrl: proxy.url,
          token: cred.token,
          subscriptionId: sub,
          capacity: 2,
          backoff: { initialMs: 20, maxMs: 80 },
          handler: async (_event, delivery) => {
            epochs.push(delivery.lease_epoch);
            if (delivery.lease_epoch === "1") return first; // outlives its lease: epoch 2 comes
            if (delivery.lease_epoch === "2") proxy.cut(); // its ACK finds no connection: the proof waits
          },
        }).start();
        await results(q, 1);
        await until(() => epochs.length === 2 && c.pendingAcks === 1);
        releaseFirst(); // the first handler ends now, with the older proof
        await sleep(20);
        proxy.restore();
        await until(async () => (await states(sub)).ACKED === 1);
        const check = await db.connect();
        try {
          const [rows] = await check.query<any[]>("SELECT lease_epoch FROM deliveries WHERE subscription_id = ?", [
            sub,
          ]);
          // Were the older proof kept instead, it would be refused (DELIVERY_LEASE_LOST) and
          // dropped: the delivery would wait out lease 2 and be ACKed only at epoch 3, an
          // attempt spent.
          assert.equal(String(rows[0].lease_epoch), "2", "ACKED with the proof of lease 2, on the next connection");
        } finally {
          await check.end();
        }
        assert.deepEqual(epochs, ["1", "2"]);
        assert.equal(c.pendingAcks, 0);
        await c.stop({ deadlineMs: 200 });
      } finally {
        await proxy.close();
      }
    });

    it("backs off across connections a node closes right after the welcome, instead of reconnecting in a loop", async () => {
      const { sub } = await setup();
      const proxy = await startProxy(node.port);
      try {
        proxy.cutAfterGreeting();
        const c = new Consumer({
          baseUrl: proxy.url,
          token: cred.token,
          subscriptionId: sub,
          capacity: 1,
          backoff: { initialMs: 50 },
          handler: async () => undefined,
        }).start();
        await sleep(2000);
        await c.stop({ deadlineMs: 200 });
        // Each wait doubles from 50 ms, jittered over its upper half (25-50, 50-100, ...,
        // 800-1600 ms): at most 7 connections in 2 s. Reset at every welcome, the waits
        // would stay 0-50 ms: ~50 connections.
        assert.ok(proxy.upgrades >= 3, `it reconnected (${proxy.upgrades})`);
        assert.ok(proxy.upgrades <= 7, `${proxy.upgrades} connections in 2 s`);
      } finally {
        await proxy.close();
      }
    });

    it("settles stop() for a consumer never started, and hands saveProofs the proofs it was given", async () => {
      const proof: Proof = { delivery_id: "0".repeat(32), epoch: "1", lease_secret: "A".repeat(43) };
      const c = new Consumer({
        baseUrl: node.url,
        token: cred.token,
        subscriptionId: "0".repeat(32),
        proofs: [proof],
        handler: async () => undefined,
      });
      let saved: Proof[] | undefined;
      const stopped = await Promise.race([
        c.stop({ saveProofs: async (p) => void (saved = p) }),
        sleep(5000).then(() => "still waiting"),
      ]);
      assert.deepEqual(stopped, { stopped: true });
      assert.deepEqual(await c.done, { stopped: true });
      assert.deepEqual(saved, [proof]);
      c.start(); // after stop(): nothing starts
      await sleep(200);
      assert.deepEqual(c.unconfirmedProofs(), [proof], "no connection sent (and dropped) the proof");
    });

    it("keeps the token out of util.inspect of a consumer, a client and a connection", async () => {
      const { sub } = await setup();
      // The secret is the token's last 43 characters; base64url may hold "_" itself.
      const secret = cred.token.slice(-43);
      const c = new Consumer({
        baseUrl: node.url,
        token: cred.token,
        subscriptionId: sub,
        handler: async () => undefined,
      });
      const api2 = new OrbitClient({ baseUrl: node.url, token: cred.token });
      await api2.getCurrentCredential(); // it has used the token
      const conn = await EventConnection.open({
        baseUrl: node.url,
        token: cred.token,
        subscriptionId: sub,
        capacity: 1,
      });
      try {
        for (const [name, o] of [
          ["Consumer", c],
          ["OrbitClient", api2],
          ["EventConnection", conn],
        ] as const) {
          const shown = inspect(o, { depth: 8, showHidden: true });
          assert.ok(!shown.includes(secret), `${name} shows the token's secret`);
        }
      } finally {
        await conn.close();
      }
    });

    it("stops and reports on NOT_FOUND, PERMISSION_DENIED and EVENT_HISTORY_EXPIRED instead of looping", async () => {
      const handler = async () => undefined;
      const notFound = await new Consumer({
        baseUrl: node.url,
        token: cred.token,
        subscriptionId: "0".repeat(32),
        handler,
      }).start().done;
      assert.equal(notFound.stopped, false);
      assert.equal(!notFound.stopped && notFound.error.code, "NOT_FOUND");
      const noConsume = await makeCredential(db, {
        namespaceId: cred.namespace_id,
        applicationId: cred.application_id,
        actions: ["events:read"],
        queueIds: [],
      });
      const denied = await new Consumer({
        baseUrl: node.url,
        token: noConsume.token,
        subscriptionId: "0".repeat(32),
        handler,
      }).start().done;
      assert.equal(!denied.stopped && denied.error.code, "PERMISSION_DENIED");
      const gap = await bootstrap(db.url, { namespace: "gap", application: "app", queues: ["q"], eventAccess: true });
      const gapApi = client(node.url, gap.token);
      const sub = (await gapApi.post("/v1/subscriptions", { name: "gap", queue_id: gap.queues[0]!.id, max_pending: 1 }))
        .json.data.subscription.id;
      for (let i = 0; i < 3; i++) {
        const t = (await gapApi.post("/v1/tasks", { queue_id: gap.queues[0]!.id, input: i })).json.data.task;
        await gapApi.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" });
      }
      await waitSequenced(db, gap.namespace_id);
      assert.equal(
        (await runCli(["purge", "--namespace", "gap", "--before", "3"], { ORBIT_DATABASE_URL: db.url })).code,
        0,
      );
      const started = Date.now();
      const expired = await new Consumer({ baseUrl: node.url, token: gap.token, subscriptionId: sub, handler }).start()
        .done;
      assert.equal(!expired.stopped && expired.error.code, "EVENT_HISTORY_EXPIRED");
      assert.ok(Date.now() - started < 5000, "reported at once, no retry loop");
    });

    it("refuses a capacity outside 1-32 or a malformed subscription id at once instead of retrying a hello that cannot be sent", () => {
      const handler = async () => undefined;
      for (const capacity of [0, 33, 1.5]) {
        assert.throws(
          () =>
            new Consumer({ baseUrl: node.url, token: cred.token, subscriptionId: "0".repeat(32), capacity, handler }),
          RangeError,
        );
      }
      for (const subscriptionId of ["A".repeat(32), "0".repeat(31), ""]) {
        assert.throws(
          () => new Consumer({ baseUrl: node.url, token: cred.token, subscriptionId, handler }),
          RangeError,
        );
      }
    });

    it("waits the node's Retry-After before reconnecting after a refused upgrade", async () => {
      const fullNode = await startNode(db.url, { ORBIT_MAX_CONNECTIONS: "1" });
      try {
        const { sub } = await setup();
        const seat = await EventConnection.open({
          baseUrl: fullNode.url,
          token: cred.token,
          subscriptionId: sub,
          capacity: 1,
        });
        const refused: OrbitEventError[] = [];
        const c = new Consumer({
          baseUrl: fullNode.url,
          token: cred.token,
          subscriptionId: sub,
          capacity: 1,
          backoff: { initialMs: 20 },
          onError: (e) => e instanceof OrbitEventError && refused.push(e),
          handler: async () => undefined,
        }).start();
        await sleep(1500);
        await seat.close();
        assert.equal(refused[0]?.code, "CAPACITY_EXCEEDED");
        assert.equal(refused[0]?.status, 429);
        assert.equal(refused[0]?.retryAfterMs, 1000);
        assert.ok(refused.length <= 2, `at most one retry in 1.5 s with Retry-After: 1 (${refused.length} attempts)`);
        await c.stop();
      } finally {
        await fullNode.stop();
      }
    });

    it("stops when stop() comes while it is still connecting", async () => {
      const { sub } = await setup();
      const c = new Consumer({
        baseUrl: node.url,
        token: cred.token,
        subscriptionId: sub,
        handler: async () => undefined,
      }).start();
      const stopped = await Promise.race([c.stop({ deadlineMs: 500 }), sleep(5000).then(() => "still running")]);
      assert.deepEqual(stopped, { stopped: true });
    });

    it("gives up on a node that takes the upgrade but never answers the hello, and moves on to the next", async function () {
      // Without a deadline on the welcome (the heartbeat starts only after it), a frozen node
      // would hold the consumer for ever: no other node would be tried, and stop() (orbit
      // listen's Ctrl-C) would never return.
      this.timeout(40000);
      // The real node behind a proxy that lets its 101 through and nothing after it: the
      // node takes the upgrade and the hello, and its welcome never arrives.
      const silent = await startProxy(node.port);
      silent.muteServerAfterUpgrade();
      try {
        const { q, sub } = await setup();
        const started = Date.now();
        await assert.rejects(
          EventConnection.open({
            baseUrl: silent.url,
            token: cred.token,
            subscriptionId: sub,
            capacity: 1,
            connectTimeoutMs: 300,
          }),
          {
            code: "CONNECTION_CLOSED",
            message: "CONNECTION_CLOSED: no welcome within 300 ms",
          },
        );
        assert.ok(Date.now() - started < 3000);

        const handled: string[] = [];
        let gaveUp!: () => void;
        const gaveUpOnSilent = new Promise<void>((r) => (gaveUp = r));
        const c = new Consumer({
          baseUrl: [silent.url, node.url],
          token: cred.token,
          subscriptionId: sub,
          capacity: 1,
          backoff: { initialMs: 20 },
          onError: (e) =>
            e instanceof OrbitEventError && e.message === "CONNECTION_CLOSED: no welcome within 10000 ms" && gaveUp(),
          handler: async (event) => void handled.push(event.id),
        }).start();
        await gaveUpOnSilent;
        // Produced once the consumer left the silent node: a session there, bound but
        // unheard, would otherwise take the delivery and hold it until its lease ran out.
        await results(q, 1);
        await until(() => handled.length === 1, 25000);
        await c.stop({ deadlineMs: 500 });

        const muted = silent.mutedFromServer;
        const reported: unknown[] = [];
        const stuck = new Consumer({
          baseUrl: silent.url,
          token: cred.token,
          subscriptionId: sub,
          handler: async () => undefined,
          onError: (e) => void reported.push(e),
        }).start();
        await until(() => silent.mutedFromServer > muted); // connecting: the hello taken, its welcome lost
        // stop() gives up the connection being opened: within its deadline, not after the
        // welcome's 10 s (and without reporting them as a failure).
        const stopping = Date.now();
        const stopped = await Promise.race([
          stuck.stop({ deadlineMs: 500 }),
          sleep(15000).then(() => "still waiting for a welcome"),
        ]);
        assert.deepEqual(stopped, { stopped: true });
        assert.ok(Date.now() - stopping < 3000, `stop took ${Date.now() - stopping} ms`);
        assert.deepEqual(reported, []);
      } finally {
        await silent.close();
      }
    });

    it("stops within its deadline when the node never answers the close frame", async function () {
      // Awaiting the close handshake unbounded, a node that never answers the close would hold
      // stop() for ws's closing timeout (30 s), past the deadline orbit listen's Ctrl-C relies on.
      this.timeout(40000);
      // The real node behind a proxy that, once the welcome has passed, forwards nothing
      // from the client: the node never reads the close frame, so it never answers it.
      const deaf = await startProxy(node.port);
      deaf.muteClientAfterGreeting();
      try {
        const { q, sub } = await setup();
        await results(q, 1);
        let delivered!: () => void;
        const connected = new Promise<void>((r) => (delivered = r));
        const c = new Consumer({
          baseUrl: deaf.url,
          token: cred.token,
          subscriptionId: sub,
          capacity: 1,
          // No ACK: the node would not hear it either, and stop() would spend its deadline
          // re-sending it. Only the close is under test.
          ack: false,
          handler: async () => delivered(),
        }).start();
        await connected; // a delivery arrived: the consumer is connected, past the welcome
        const started = Date.now();
        const stopped = await Promise.race([
          c.stop({ deadlineMs: 500 }),
          sleep(15000).then(() => "still waiting for the close"),
        ]);
        assert.deepEqual(stopped, { stopped: true });
        assert.ok(Date.now() - started < 3000, `stop took ${Date.now() - started} ms`);
      } finally {
        await deaf.close();
      }
    });

    it("ACKs on the next connection a delivery whose handler outlived its connection, and never runs more handlers than capacity", async () => {
      // A lease far longer than the test: nothing may come back because a lease ran out.
      const longLease = await startNode(db.url, { ORBIT_LEASE_DURATION_MS: "20000" });
      const proxy = await startProxy(longLease.port);
      try {
        const { q, sub } = await setup();
        let calls = 0;
        let running = 0;
        let mostRunning = 0;
        const c = new Consumer({
          baseUrl: proxy.url,
          token: cred.token,
          subscriptionId: sub,
          capacity: 1,
          backoff: { initialMs: 50 },
          handler: async () => {
            calls++;
            mostRunning = Math.max(mostRunning, ++running);
            if (calls === 1) {
              proxy.cut(); // the connection that delivered this one is gone
              await sleep(100);
              proxy.restore();
              await sleep(1500); // the consumer reconnects meanwhile
            }
            running--;
          },
        }).start();
        await sleep(300);
        await results(q, 2);
        await until(async () => (await states(sub)).ACKED === 2, 6000);
        assert.equal(calls, 2, "each result handled once");
        assert.equal(mostRunning, 1, "capacity 1: one handler at a time, across connections too");
        await until(() => c.pendingAcks === 0);
        await c.stop();
      } finally {
        await proxy.close();
        await longLease.stop();
      }
    });

    it("hands back at stop the proofs whose ACK was not confirmed; a consumer given them ACKs on its first connection (§7)", async function () {
      this.timeout(40000);
      // docs/protocol.md §7: a closing client first finishes its own local persistence and
      // saves the proofs of unconfirmed ACKs, then closes the connection.
      // A lease long enough that nothing is redelivered meanwhile: the saved proof is what ACKs.
      const longLease = await startNode(db.url, { ORBIT_LEASE_DURATION_MS: "30000" });
      const proxy = await startProxy(longLease.port);
      try {
        const { q, sub } = await setup();
        proxy.muteClientWhen("event.ack"); // the ACK never reaches the node: unconfirmed at stop
        let handled = 0;
        const first = new Consumer({
          baseUrl: proxy.url,
          token: cred.token,
          subscriptionId: sub,
          capacity: 1,
          handler: async () => void handled++,
        }).start();
        await sleep(300);
        await results(q, 1);
        await until(() => handled === 1 && first.pendingAcks === 1);
        // Save the proofs, then close: the save comes while the connection is still open.
        const saves: { proofs: Proof[]; closedAt: unknown[] }[] = [];
        await first.stop({
          deadlineMs: 300,
          saveProofs: async (proofs) => {
            await sleep(300); // a close sent before the save would be recorded by now
            const rows = await db.query("SELECT closed_at FROM event_sessions WHERE subscription_id = ?", [sub]);
            saves.push({ proofs, closedAt: rows.map((r) => r.closed_at) });
          },
        });
        assert.equal(saves.length, 1, "saveProofs is called once, at stop");
        assert.deepEqual(saves[0]!.closedAt, [null], "saved before the close: the node still had the session open");
        const saved = saves[0]!.proofs;
        assert.equal(saved.length, 1, "the proof to save");
        assert.deepEqual(first.unconfirmedProofs(), saved);
        assert.deepEqual(await states(sub), { LEASED: 1 }, "its ACK never arrived");
        let redelivered = 0;
        const second = new Consumer({
          baseUrl: longLease.url,
          token: cred.token,
          subscriptionId: sub,
          capacity: 1,
          proofs: saved,
          handler: async () => void redelivered++,
        }).start();
        await until(async () => (await states(sub)).ACKED === 1);
        await until(() => second.pendingAcks === 0);
        assert.equal(redelivered, 0, "ACKed with the saved proof, not delivered again");
        const [row] = await db.query("SELECT lease_epoch, attempts FROM deliveries WHERE subscription_id = ?", [sub]);
        assert.deepEqual(
          [String(row.lease_epoch), row.attempts],
          ["1", 1],
          "no attempt of the budget spent on a redelivery",
        );
        // A failed save is stop()'s rejection, after the close: the consumer still ends.
        await assert.rejects(
          second.stop({ saveProofs: async () => Promise.reject(new Error("inbox unavailable")) }),
          /inbox unavailable/,
        );
        assert.deepEqual(await second.done, { stopped: true });
        // A save that never ends does not hold stop() for ever (the wind-down is bounded).
        const third = new Consumer({
          baseUrl: longLease.url,
          token: cred.token,
          subscriptionId: sub,
          capacity: 1,
          handler: async () => {},
        }).start();
        const t0 = Date.now();
        await assert.rejects(
          third.stop({ deadlineMs: 200, saveProofs: () => new Promise<void>(() => undefined) }),
          /saveProofs did not finish within 1000 ms/,
        );
        assert.ok(Date.now() - t0 < 3000, `stop() took ${Date.now() - t0} ms`);
        assert.deepEqual(await third.done, { stopped: true });
        assert.throws(
          () =>
            new Consumer({
              baseUrl: longLease.url,
              token: cred.token,
              subscriptionId: sub,
              proofs: [{ delivery_id: "x", epoch: "1", lease_secret: "y" }],
              handler: async () => {},
            }),
          RangeError,
        );
      } finally {
        await proxy.close();
        await longLease.stop();
      }
    });

    it("drains on stop: no new deliveries, running handlers finish and are ACKed, bounded by the deadline", async () => {
      const { q, sub } = await setup();
      await results(q, 2);
      let started = 0;
      let finished = 0;
      const c = new Consumer({
        baseUrl: node.url,
        token: cred.token,
        subscriptionId: sub,
        capacity: 1,
        handler: async () => {
          started++;
          await sleep(300);
          finished++;
        },
      }).start();
      await until(() => started === 1);
      const t0 = Date.now();
      assert.deepEqual(await c.stop({ deadlineMs: 5000 }), { stopped: true });
      assert.ok(Date.now() - t0 < 2000);
      assert.equal(finished, 1, "the running handler finished");
      assert.equal(started, 1, "no new delivery was taken while draining");
      assert.equal((await states(sub)).ACKED, 1, "and its ACK was sent before closing");

      const { q: q2, sub: sub2 } = await setup();
      await results(q2, 1);
      let running = false;
      const slow = new Consumer({
        baseUrl: node.url,
        token: cred.token,
        subscriptionId: sub2,
        capacity: 1,
        handler: async () => {
          running = true;
          await sleep(5000);
        },
      }).start();
      await until(() => running);
      const t1 = Date.now();
      await slow.stop({ deadlineMs: 300 });
      assert.ok(Date.now() - t1 < 1500, "the deadline bounds the drain");
      assert.equal((await states(sub2)).ACKED, undefined, "nothing is ACKed before its handler resolved");
    });
  });
});

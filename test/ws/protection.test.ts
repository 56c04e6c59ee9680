// Node protection and shutdown over real sockets: a claim stuck in the database never
// holds up hello, ping or ACK (claims have their own pool); SIGTERM closes event
// connections with 1001 and leaves every lease in the database.
import { strict as assert } from "node:assert";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, type Client } from "../helpers/api.js";
import net, { type Socket } from "node:net";
import { connect, mid, refusal, type TestSocket, type UpgradeRefusal } from "../helpers/ws.js";

describe("event connections: protection and shutdown", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  let api: Client;
  let q: string;
  const open: TestSocket[] = [];

  async function result(): Promise<void> {
    const t = (await api.post("/v1/tasks", { queue_id: q, input: 1 })).json.data.task;
    await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" });
  }

  /** A new subscription with one result, and a connection of the given capacity (to `url`) that has received it. */
  async function consuming(name: string, capacity: number, url = node.url) {
    const sub = (await api.post("/v1/subscriptions", { name, queue_id: q })).json.data.subscription.id as string;
    await result();
    const s = await connect(url, { token: cred.token });
    open.push(s);
    await s.hello(sub, capacity);
    return { sub, s, d: await s.nextOfType("event.deliver") };
  }

  /** Runs `during` while another connection holds a row lock (`lockSql` with `id`), then lets it go. */
  async function whileLocked(lockSql: string, id: string, during: () => Promise<void>): Promise<void> {
    const c = await db.connect();
    try {
      await c.query("SET SESSION innodb_lock_wait_timeout = 10");
      await c.beginTransaction();
      await c.query(lockSql, [id]);
      await during();
    } finally {
      await c.rollback();
      await c.end();
    }
  }

  /**
   * Until the ACK's proof lock (selectProofs) is running while `whileLocked` holds the
   * delivery's row: it can only be waiting for that lock. Read off PROCESSLIST, not
   * INNODB_TRX: MariaDB 10.11.19 waits on a one-row `id IN (…) FOR UPDATE` while planning
   * ("Statistics"), before INNODB_TRX lists the transaction, so a check of
   * INNODB_TRX may never see it (attempt-batches.test does the same).
   */
  async function ackLockWaited(): Promise<void> {
    for (const until = Date.now() + 10000; ; await new Promise((r) => setTimeout(r, 50))) {
      const [row] = await db.query(
        `SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST
          WHERE DB = ? AND COMMAND = 'Query' AND INFO LIKE 'SELECT % FROM deliveries WHERE subscription_id = % AND id IN (%) FOR UPDATE'`,
        [db.name],
      );
      if (Number(row.n) > 0) return;
      assert.ok(Date.now() < until, "the ACK waits for the delivery's row lock");
    }
  }

  before(async () => {
    db = await freshDatabase("ws_protection");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
    node = await startNode(db.url);
    api = client(node.url, cred.token);
    q = cred.queues[0]!.id;
  });
  after(async () => {
    for (const s of open) s.ws.terminate();
    await node?.stop();
    await db?.drop();
  });

  it("answers hello, ping and ACK while claims are stuck on a locked subscription", async () => {
    const { sub, s, d } = await consuming("stuck", 2);
    // Every claim waits on the subscription's row.
    await whileLocked("SELECT id FROM subscriptions WHERE id = ? FOR UPDATE", sub, async () => {
      await result();
      const started = Date.now();
      const other = await connect(node.url, { token: cred.token });
      open.push(other);
      assert.equal((await other.hello(sub, 1)).type, "events.welcome");
      assert.equal((await s.ping()).type, "ack");
      assert.equal((await s.ack(d)).type, "ack");
      assert.ok(Date.now() - started < 3000, "control traffic did not wait for the claims");
      assert.equal(s.frames.filter((f) => f.type === "event.deliver").length, 1, "no claim got through the lock");
    });
    // The claims go on once the lock is gone: one of the two connections gets the result.
    const both = open.slice(-2);
    const count = () => both.reduce((n, x) => n + x.frames.filter((f) => f.type === "event.deliver").length, 0);
    for (const until = Date.now() + 10000; count() < 2;) {
      assert.ok(Date.now() < until, "the second result was delivered after the lock went");
      await new Promise((r) => setTimeout(r, 50));
    }
  });

  it("processes at most 4 frames of a connection at once (read queue); ACKs wait for their commit outside it, up to 32", async () => {
    const { s, d } = await consuming("read-queue", 1);
    const ack = {
      delivery_id: d.body!.delivery.id,
      epoch: d.body!.delivery.lease_epoch,
      lease_secret: d.body!.lease_secret,
    };
    const acks: string[] = [];
    /** ACKs, then a ping, in one TCP segment, so that the server reads them in one go. */
    const burst = (n: number): string => {
      const socket = (s.ws as unknown as { _socket: Socket })._socket;
      socket.cork();
      for (let i = 0; i < n; i++) {
        acks.push(mid());
        s.send({
          protocol_version: "1",
          type: "event.ack",
          message_id: acks[acks.length - 1],
          session_id: s.sessionId,
          body: ack,
        });
      }
      const pingId = mid();
      s.send({ protocol_version: "1", type: "events.ping", message_id: pingId, session_id: s.sessionId, body: {} });
      socket.uncork();
      return pingId;
    };
    const ackReplies = () => s.frames.filter((f) => acks.includes(f.reply_to!));
    /** Every ACK of the delivery waits on its row lock during `stuck`. */
    const acksStuck = (stuck: () => Promise<void>) =>
      whileLocked("SELECT id FROM deliveries WHERE id = ? FOR UPDATE", d.body!.delivery.id, stuck);
    // 36 ACKs and a ping at once: 32 ACKs wait for their commit without a read slot, the
    // next 4 hold the 4 slots while they wait, and the ping waits its turn behind them.
    let ping = "";
    await acksStuck(async () => {
      ping = burst(36);
      await new Promise((r) => setTimeout(r, 700));
      assert.deepEqual(
        s.frames.filter((f) => f.reply_to === ping),
        [],
        "the ping waited behind the 4 ACKs in the queue",
      );
      assert.deepEqual(ackReplies(), [], "no ACK answered before its commit");
    });
    // Once the lock goes, every frame is answered, each ACK after its commit: one of them
    // the first ACK of the delivery, the rest replays of it.
    const replies = await Promise.all(acks.map((id) => s.next((f) => f.reply_to === id)));
    assert.ok(replies.every((f) => f.type === "ack"));
    assert.equal(replies.filter((f) => f.body?.deduplicated === false).length, 1);
    assert.ok((await s.next((f) => f.reply_to === ping)).body?.server_time, "the ping is answered");
    // A few ACKs waiting for their commit hold no read slot: the ping behind them is answered at once.
    acks.length = 0;
    await acksStuck(async () => {
      ping = burst(4);
      assert.equal((await s.next((f) => f.reply_to === ping, 5000)).type, "ack");
      assert.deepEqual(ackReplies(), [], "no ACK answered before its commit");
    });
    assert.equal((await Promise.all(acks.map((id) => s.next((f) => f.reply_to === id)))).length, 4);
  });

  it("counts open sockets against the connection limit, not upgrades still being authenticated", async () => {
    // One database connection and one event connection: every upgrade's authentication
    // waits, in arrival order, behind a request that waits on a row lock. A valid upgrade
    // between two with unknown tokens must not be refused 429 CAPACITY_EXCEEDED with no
    // connection open, by counting the one still being authenticated after it.
    const small = await startNode(db.url, { ORBIT_DB_POOL_SIZE: "1", ORBIT_MAX_CONNECTIONS: "1" });
    try {
      const sub = (await api.post("/v1/subscriptions", { name: "limit", queue_id: q })).json.data.subscription
        .id as string;
      const stranger = `orbit_${"0".repeat(32)}_${"A".repeat(43)}`;
      const pause = () => new Promise((r) => setTimeout(r, 250));
      const strangers: Promise<UpgradeRefusal>[] = [];
      let valid: Promise<TestSocket> | undefined;
      let held: Promise<unknown> | undefined;
      await whileLocked("SELECT id FROM subscriptions WHERE id = ? FOR UPDATE", sub, async () => {
        held = client(small.url, cred.token).post(`/v1/subscriptions/${sub}:configure`, {
          expected_revision: "1",
          enabled: true,
          reason: "r",
        });
        await pause();
        strangers.push(refusal(connect(small.url, { token: stranger })));
        await pause();
        valid = connect(small.url, { token: cred.token });
        valid.catch(() => undefined);
        await pause();
        strangers.push(refusal(connect(small.url, { token: stranger })));
        await pause();
      });
      await held;
      for (const r of await Promise.all(strangers)) assert.equal(r.status, 401);
      const s = await valid!;
      open.push(s);
      assert.equal((await s.hello(sub, 1)).type, "events.welcome");
    } finally {
      await small.stop();
    }
  });

  it("stops accepting on SIGTERM before it closes event connections", async () => {
    const extra = await startNode(db.url);
    const { s } = await consuming("stop-accepting", 1, extra.url);
    // A consumer that does not read: its close handshake holds the shutdown up (2 s at most).
    s.ws.pause();
    const code = extra.stop("SIGTERM");
    await new Promise((r) => setTimeout(r, 500));
    const refused = await fetch(`${extra.url}/v1/health`).then(
      (r) => `answered ${r.status}`,
      (e: Error & { cause?: { code?: string } }) => e.cause?.code,
    );
    assert.equal(refused, "ECONNREFUSED", "no new connection while event connections close");
    assert.equal(await code, 0);
  });

  it("does not wait on SIGTERM for a client that never answered a close the node sent before", async () => {
    // The node closes a connection that sent no hello (1008); the client never answers the
    // close frame. Such a socket leaves the node's connections, but may stay open for ws's 30 s
    // closing timeout: the shutdown must not wait for it (docs/operations.md: "exits 0, within
    // about 10 s").
    const extra = await startNode(db.url, { ORBIT_HELLO_TIMEOUT_MS: "200" });
    const socket = net.connect(extra.port, "127.0.0.1");
    socket.on("error", () => undefined);
    await new Promise((r) => socket.once("connect", r));
    let received = "";
    socket.on("data", (d: Buffer) => (received += d.toString("latin1")));
    socket.write(
      "GET /v1/events/connect HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" +
        `Sec-WebSocket-Protocol: orbit.events.v1\r\nAuthorization: Bearer ${cred.token}\r\n\r\n`,
    );
    try {
      for (let i = 0; i < 50 && !received.includes("\x88"); i++) await new Promise((r) => setTimeout(r, 50));
      assert.ok(
        received.startsWith("HTTP/1.1 101 ") && received.includes("\x88"),
        "upgraded, then closed by the node (no hello)",
      );
      const started = Date.now();
      assert.equal(await extra.stop("SIGTERM"), 0);
      const took = Date.now() - started;
      assert.ok(took < 5000, `stopped after ${took} ms`);
      assert.ok(!extra.lines.some((l) => l.includes("shutdown deadline passed")));
    } finally {
      socket.destroy();
      extra.process.kill("SIGKILL");
    }
  });

  it("answers an ACK still waiting for its commit before it closes the connection with 1001 on SIGTERM", async () => {
    // Shutdown (docs/operations.md): ACKs in flight commit and are answered, then connections close.
    // An ACK the node had taken and closed on unanswered would leave the consumer unsure
    // whether it counted.
    const extra = await startNode(db.url);
    const { s, d } = await consuming("shutdown-ack", 1, extra.url);
    let answer: Promise<unknown> | undefined;
    let code: Promise<number | null> | undefined;
    await whileLocked("SELECT id FROM deliveries WHERE id = ? FOR UPDATE", d.body.delivery.id, async () => {
      answer = s.ack(d);
      await ackLockWaited(); // the ACK's transaction waits on the delivery's row
      code = extra.stop("SIGTERM");
      // Time for a node that would not wait for the ACK to close the connection.
      await Promise.race([s.closed, new Promise((r) => setTimeout(r, 1000))]);
    });
    const reply = (await answer) as { type: string; body?: { deduplicated?: boolean } };
    assert.deepEqual([reply.type, reply.body?.deduplicated], ["ack", false]);
    assert.equal((await s.closed).code, 1001);
    assert.equal(await code, 0);
    assert.equal((await db.query("SELECT state FROM deliveries WHERE id = ?", [d.body.delivery.id]))[0].state, "ACKED");
  });

  it("closes event connections with 1001 on SIGTERM and keeps their leases", async () => {
    const extra = await startNode(db.url);
    const { sub, s, d } = await consuming("shutdown", 1, extra.url);
    const code = extra.stop("SIGTERM");
    assert.equal((await s.closed).code, 1001);
    assert.equal(await code, 0);
    const c = await db.connect();
    try {
      const [rows] = await c.query<any[]>("SELECT state FROM deliveries WHERE id = ?", [d.body.delivery.id]);
      assert.equal(rows[0].state, "LEASED", "shutdown never erases a lease");
      const [sessions] = await c.query<any[]>("SELECT closed_at FROM event_sessions WHERE id = ?", [s.sessionId]);
      assert.ok(sessions[0].closed_at instanceof Date, "the session's end is recorded");
    } finally {
      await c.end();
    }
    // The proof still works on another node.
    const again = await connect(node.url, { token: cred.token });
    open.push(again);
    await again.hello(sub, 1);
    assert.equal((await again.ack(d)).type, "ack");
  });
});

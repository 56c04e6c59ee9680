// What event connections may cost a node: upgrades are refused before any database work
// when the node is full or already looking up as many credentials as it allows, lookups
// have a deadline, each application has a limit of its own, and pings cost the database
// at most one check per second per connection. Real nodes, their database reached through
// a proxy the test can stall.
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import net from "node:net";
import { client } from "../helpers/api.js";
import { freshDatabase, MYSQL_PORT, type TestDatabase } from "../helpers/db.js";
import { queueWithSubscription } from "../helpers/fixtures.js";
import { request } from "../helpers/http.js";
import { bootstrap, runCli, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { startProxy, type Proxy } from "../helpers/proxy.js";
import { connect, refusal, type TestSocket } from "../helpers/ws.js";

/** A well-formed token of a credential that does not exist: it costs a lookup to refuse. */
const madeUpToken = () =>
  `orbit_${randomBytes(16).toString("hex")}_${randomBytes(32).toString("base64url").slice(0, 43)}`;

/** A raw upgrade request; resolves with the status line's code, or "closed" / "timeout". */
function rawUpgrade(port: number, token: string, timeoutMs = 20000): Promise<number | string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1", () =>
      socket.write(
        "GET /v1/events/connect HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
          `Sec-WebSocket-Key: ${randomBytes(16).toString("base64")}\r\nSec-WebSocket-Version: 13\r\n` +
          `Sec-WebSocket-Protocol: orbit.events.v1\r\nAuthorization: Bearer ${token}\r\n\r\n`,
      ),
    );
    let text = "";
    const timer = setTimeout(() => {
      socket.destroy();
      resolve("timeout");
    }, timeoutMs);
    socket.on("data", (d) => {
      text += d;
      const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
      if (m) {
        clearTimeout(timer);
        socket.destroy();
        resolve(Number(m[1]));
      }
    });
    socket.on("error", () => undefined);
    socket.on("close", () => {
      clearTimeout(timer);
      resolve("closed");
    });
  });
}

describe("event connection limits and their cost", function () {
  this.timeout(120000);
  let db: TestDatabase;
  let proxy: Proxy;
  let cred: BootstrapOutput;
  let sub: string;
  const nodes: OrbitNode[] = [];

  before(async () => {
    db = await freshDatabase("upgrade_limits");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q0"], eventAccess: true });
    proxy = await startProxy(MYSQL_PORT);
  });
  afterEach(async () => {
    proxy.release();
    while (nodes.length) await nodes.pop()!.stop();
  });
  after(() => proxy?.close());

  const start = async (env: Record<string, string> = {}, viaProxy = false) => {
    const node = await startNode(viaProxy ? db.urlVia(proxy) : db.url, env);
    nodes.push(node);
    if (!sub) sub = (await queueWithSubscription(db, cred, client(node.url, cred.token))).sub;
    return node;
  };

  it("answers 1,000 upgrades with made-up tokens and stays responsive meanwhile", async () => {
    const node = await start();
    const flood = Array.from({ length: 1000 }, () => rawUpgrade(node.port, madeUpToken()));
    const health = await request(node.url, { path: "/v1/health" });
    assert.equal(health.status, 200);
    const answers = await Promise.all(flood);
    assert.ok(
      answers.every((a) => a === 401 || a === 503),
      `unexpected answers: ${[...new Set(answers)].join(", ")}`,
    );
    // A real consumer gets in once the flood is answered.
    const s = await connect(node.url, { token: cred.token });
    assert.equal((await s.hello(sub, 1)).type, "events.welcome");
    s.close();
  });

  it("refuses upgrades beyond the lookups in flight at once, and ends a lookup at the deadline, while the database stalls", async () => {
    const node = await start({ ORBIT_REQUEST_TIMEOUT_MS: "5000" }, true);
    proxy.hold();
    const started = Date.now();
    const timed = await Promise.all(
      Array.from({ length: 60 }, () =>
        rawUpgrade(node.port, madeUpToken()).then((a) => ({ a, after: Date.now() - started })),
      ),
    );
    // 32 lookups at once (MAX_UPGRADES_AUTHENTICATING) end at the 5 s deadline with 503;
    // the other 28 are refused 503 at once, before any database work.
    assert.deepEqual(
      timed.filter((t) => t.a !== 503),
      [],
    );
    const atOnce = timed.filter((t) => t.after < 2500).length;
    assert.ok(atOnce >= 20 && atOnce <= 28, `${atOnce} refused before the deadline, not the 28 beyond the 32 lookups`);
    assert.ok(Date.now() - started < 15000, "the lookups outlived their deadline");
    // Liveness needs no database: it answers while every lookup is stalled.
    assert.equal((await request(node.url, { path: "/healthz" })).status, 200);
    proxy.release();
    // Held lookups settle once the database answers; then upgrades are served again.
    for (const end = Date.now() + 15000; ;) {
      const a = await rawUpgrade(node.port, madeUpToken());
      if (a === 401) break;
      assert.ok(Date.now() < end, `still refused: ${a}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  });

  it("answers 429 on a full node before looking the credential up", async () => {
    const node = await start({ ORBIT_MAX_CONNECTIONS: "1" }, true);
    const held = await connect(node.url, { token: cred.token });
    proxy.hold(); // no lookup could be answered now
    const r = await refusal(connect(node.url, { token: madeUpToken() }));
    assert.equal(r.status, 429);
    assert.equal(r.body.error.code, "CAPACITY_EXCEEDED");
    assert.equal(r.headers["retry-after"], "1");
    proxy.release();
    held.close();
  });

  it("limits the event connections of one application on a node, not the others'", async () => {
    const node = await start({ ORBIT_MAX_CONNECTIONS_PER_APPLICATION: "2" });
    const other = await bootstrap(db.url, { namespace: "ns", application: "other", queues: ["q1"], eventAccess: true });
    const mine: TestSocket[] = [
      await connect(node.url, { token: cred.token }),
      await connect(node.url, { token: cred.token }),
    ];
    const r = await refusal(connect(node.url, { token: cred.token }));
    assert.equal(r.status, 429);
    assert.equal(r.body.error.code, "CAPACITY_EXCEEDED");
    assert.match(r.body.error.message, /application/);
    assert.equal(r.headers["retry-after"], "1");
    // Another application of the same namespace is not held back by this one.
    const theirs = await connect(node.url, { token: other.token });
    // A connection that closes frees its application's place.
    mine[0]!.close();
    await mine[0]!.closed;
    for (const end = Date.now() + 5000; ;) {
      const again = await connect(node.url, { token: cred.token }).catch(() => undefined);
      if (again) {
        again.close();
        break;
      }
      assert.ok(Date.now() < end, "the closed connection's place was not freed");
      await new Promise((r) => setTimeout(r, 100));
    }
    mine[1]!.close();
    theirs.close();
  });

  it("refuses a bad ORBIT_MAX_CONNECTIONS_PER_APPLICATION at start-up", async () => {
    for (const bad of ["0", "-1", "x", "100001"]) {
      const res = await runCli(["serve"], {
        ORBIT_DATABASE_URL: db.url,
        ORBIT_PORT: "0",
        ORBIT_MAX_CONNECTIONS_PER_APPLICATION: bad,
      });
      assert.equal(res.code, 1, `${bad}: ${res.stdout}${res.stderr}`);
      assert.match(res.stderr + res.stdout, /ORBIT_MAX_CONNECTIONS_PER_APPLICATION/);
    }
  });

  it("checks the database at most 5 times a second for a connection that pings without pause", async () => {
    const node = await start({}, true);
    const s = await connect(node.url, { token: cred.token });
    assert.equal((await s.hello(sub, 1)).type, "events.welcome");
    await s.ping(); // the first ping checks
    const before = proxy.chunksFromClients;
    const started = Date.now();
    let pongs = 0;
    while (Date.now() - started < 2000) {
      const pong = await s.ping();
      assert.equal(pong.type, "ack");
      pongs++;
    }
    const statements = proxy.chunksFromClients - before;
    // 5 checks a second are a round trip or two each; the node's head poll (every 200 ms,
    // for the namespace of this session) and the session's recheck add about a dozen. A
    // check per ping would be thousands.
    assert.ok(pongs > 200, `only ${pongs} pings answered`);
    assert.ok(statements < 60, `${statements} statements for ${pongs} pings`);

    // A revoked credential still closes the connection at the first ping of a new second.
    const revoked = await runCli(["credential", "revoke", cred.credential_id], { ORBIT_DATABASE_URL: db.url });
    assert.equal(revoked.code, 0, revoked.stderr);
    await new Promise((r) => setTimeout(r, 1100));
    s.send({
      protocol_version: "1",
      type: "events.ping",
      message_id: randomBytes(16).toString("hex"),
      session_id: s.sessionId,
      body: {},
    });
    const closed = await s.closed;
    assert.equal(closed.code, 1008);
  });
});

// The event endpoint's upgrade guard and session rules (docs/protocol.md §5, §7) over real
// WebSocket connections to a real node, with short hello and idle timeouts.
import { strict as assert } from "node:assert";
import net from "node:net";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, runCli, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, makeCredential } from "../helpers/api.js";
import { cancelledResults } from "../helpers/fixtures.js";
import { connect, mid, refusal, type TestSocket } from "../helpers/ws.js";

const ID = "0123456789abcdef0123456789abcdef";

describe("event connections: guard and session", function () {
  this.timeout(30000);
  let db: TestDatabase;
  let node: OrbitNode;
  /**
   * For the tests that revoke with the CLI while connected: the CLI's process start can
   * take longer than node's 1.5 s idle timeout on a busy machine, and the connection would
   * close before the ping or ACK under test is sent.
   */
  let patient: OrbitNode;
  let cred: BootstrapOutput;
  let sub: string;
  const open: TestSocket[] = [];
  const conn = async (o: Parameters<typeof connect>[1] = {}, to: OrbitNode = node) => {
    const s = await connect(to.url, { token: cred.token, ...o });
    open.push(s);
    return s;
  };

  before(async () => {
    db = await freshDatabase("ws_session");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
    [node, patient] = await Promise.all([
      startNode(db.url, { ORBIT_HELLO_TIMEOUT_MS: "400", ORBIT_IDLE_TIMEOUT_MS: "1500", ORBIT_MAX_CONNECTIONS: "6" }),
      startNode(db.url),
    ]);
    const res = await client(node.url, cred.token).post("/v1/subscriptions", {
      name: "s",
      queue_id: cred.queues[0]!.id,
    });
    sub = res.json.data.subscription.id;
  });
  afterEach(async () => {
    const all = open.splice(0);
    for (const s of all) s.ws.terminate();
    await Promise.all(all.map((s) => s.closed));
    await new Promise((r) => setTimeout(r, 150)); // the node sees the FINs
  });
  after(async () => {
    await Promise.all([node?.stop(), patient?.stop()]);
    await db?.drop();
  });

  describe("upgrade guard", () => {
    const expectRefusal = async (o: Parameters<typeof connect>[1], status: number, code: string) => {
      const r = await refusal(connect(node.url, o));
      assert.equal(r.status, status, JSON.stringify(r.body));
      assert.equal(r.body.error.code, code);
      assert.match(String(r.headers["x-request-id"]), /^[0-9a-f]{32}$/);
      assert.equal(r.headers["cache-control"], "no-store");
      return r;
    };

    it("refuses before the 101: 401, 403 (action, origin), 400 (query), 426 (subprotocol)", async () => {
      await expectRefusal({}, 401, "UNAUTHENTICATED");
      await expectRefusal({ token: `orbit_${ID}_${"A".repeat(43)}` }, 401, "UNAUTHENTICATED");
      const readOnly = await makeCredential(db, {
        namespaceId: cred.namespace_id,
        applicationId: cred.application_id,
        actions: ["events:read", "events:manage"],
        queueIds: [cred.queues[0]!.id],
      });
      await expectRefusal({ token: readOnly.token }, 403, "PERMISSION_DENIED");
      // Protocol §5: read permission does not stand in for consume permission, nor does
      // consume imply reading all history. A credential that manages and consumes its own
      // subscription, without events:read, connects and is
      // welcomed, and reads none of its history.
      const consumer = await makeCredential(db, {
        namespaceId: cred.namespace_id,
        applicationId: cred.application_id,
        actions: ["events:manage", "events:consume"],
        queueIds: [cred.queues[0]!.id],
      });
      const consumerApi = client(node.url, consumer.token);
      const own = await consumerApi.post("/v1/subscriptions", {
        name: `consume-only-${Date.now()}`,
        queue_id: cred.queues[0]!.id,
      });
      assert.equal(own.status, 201, own.text);
      const ownId = own.json.data.subscription.id as string;
      const s = await conn({ token: consumer.token });
      assert.equal((await s.hello(ownId, 1)).type, "events.welcome");
      for (const path of [
        `/v1/subscriptions/${ownId}/deliveries`,
        `/v1/subscriptions/${ownId}/deliveries/${ID}`,
        `/v1/subscriptions/${ownId}`,
      ]) {
        const res = await consumerApi.get(path);
        assert.equal(res.status, 403, `${path}: ${res.text}`);
        assert.equal(res.json.error.code, "PERMISSION_DENIED");
      }
      await expectRefusal({ token: cred.token, headers: { Origin: "https://evil.example" } }, 403, "PERMISSION_DENIED");
      const crossOrigin = await expectRefusal(
        { token: cred.token, headers: { Origin: "null" } },
        403,
        "PERMISSION_DENIED",
      );
      // Each refusal says why: not "the credential lacks the action this needs" (to a
      // credential that has it), nor a bare "the request is invalid".
      assert.equal(crossOrigin.body.error.message, "cross-origin event connections are refused");
      const query = await expectRefusal({ token: cred.token, path: "/v1/events/connect?x=1" }, 400, "INVALID_ARGUMENT");
      assert.equal(query.body.error.message, "the event endpoint takes no query parameters");
      await expectRefusal(
        { token: cred.token, path: `/v1/events/connect?token=${cred.token}` },
        400,
        "INVALID_ARGUMENT",
      );
      await expectRefusal({ token: cred.token, protocol: null }, 426, "PROTOCOL_REQUIRED");
      await expectRefusal({ token: cred.token, protocol: "orbit.events.v2" }, 426, "PROTOCOL_REQUIRED");
      await expectRefusal({ token: cred.token, path: "/v1/events/other" }, 404, "NOT_FOUND");
    });

    it("accepts a same-origin Origin, ignores cookies, and answers 101 with the headers and no compression", async () => {
      const s = await conn({ headers: { Origin: node.url, Cookie: `token=${cred.token}` }, perMessageDeflate: true });
      assert.equal(s.ws.protocol, "orbit.events.v1");
      assert.equal(s.ws.extensions, "", "permessage-deflate is declined");
      const viaCookieOnly = await refusal(
        connect(node.url, { headers: { Cookie: `Authorization=Bearer ${cred.token}` } }),
      );
      assert.equal(viaCookieOnly.status, 401);
    });

    /**
     * A valid upgrade written by hand; resolves with the answer's status line and headers.
     * With `held`, the socket stays open there afterwards, a client that answers nothing.
     */
    const rawUpgrade = (extraHeaders = "", held?: net.Socket[]) =>
      new Promise<string>((resolve, reject) => {
        const sock = net.connect(node.port, "127.0.0.1", () => {
          sock.write(
            "GET /v1/events/connect HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
              `Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: orbit.events.v1\r\nAuthorization: Bearer ${cred.token}\r\n${extraHeaders}\r\n`,
          );
        });
        let out = "";
        sock.on("data", (d) => {
          out += d;
          if (out.includes("\r\n\r\n")) {
            if (held) held.push(sock);
            else sock.destroy();
            resolve(out);
          }
        });
        sock.on("error", reject);
      });

    it("answers the 101 with X-Request-ID and Cache-Control", async () => {
      const raw = await rawUpgrade();
      assert.match(raw, /^HTTP\/1\.1 101 /);
      assert.match(raw, /X-Request-ID: [0-9a-f]{32}/);
      assert.match(raw, /Cache-Control: no-store/);
      assert.match(raw, /Sec-WebSocket-Protocol: orbit\.events\.v1/);
    });

    it("takes the caller's well-formed X-Request-ID for the 101 and for a refusal, as HTTP does", async () => {
      const mine = "abcdefabcdefabcdefabcdefabcdef12";
      for (const [o, status] of [
        [{}, 401],
        [{ token: cred.token, protocol: null }, 426],
      ] as const) {
        const r = await refusal(connect(node.url, { ...o, headers: { "X-Request-ID": mine } }));
        assert.equal(r.status, status);
        assert.equal(r.headers["x-request-id"], mine);
        assert.equal(r.body.request_id, mine);
      }
      const upgraded = await rawUpgrade(`X-Request-ID: ${mine}\r\n`);
      assert.match(upgraded, /^HTTP\/1\.1 101 /);
      assert.match(upgraded, new RegExp(`X-Request-ID: ${mine}\r\n`));
    });

    it("logs one JSON line per upgrade request, refused or answered 101, as for any HTTP request", async () => {
      // docs/operations.md: "one JSON log line per request on stdout, WebSocket upgrades
      // included: request id, route, status, duration", whether refused or answered 101.
      const refusedId = "0123456789abcdef0123456789abcd01";
      const upgradedId = "0123456789abcdef0123456789abcd02";
      await refusal(
        connect(node.url, { token: `orbit_${ID}_${"A".repeat(43)}`, headers: { "X-Request-ID": refusedId } }),
      );
      await conn({ headers: { "X-Request-ID": upgradedId } });
      const logged = async (id: string) => {
        for (let i = 0; i < 40; i++) {
          const line = node.lines.map((l) => JSON.parse(l)).find((o) => o.msg === "request" && o.request_id === id);
          if (line) return line;
          await new Promise((r) => setTimeout(r, 50));
        }
        assert.fail(`no log line for request ${id}`);
      };
      for (const [id, status] of [
        [refusedId, 401],
        [upgradedId, 101],
      ] as const) {
        const line = await logged(id);
        assert.deepEqual(
          { method: line.method, route: line.route, status: line.status },
          { method: "GET", route: "connectEvents", status },
        );
        assert.equal(typeof line.duration_ms, "number");
      }
      assert.ok(!node.lines.join("\n").includes(cred.token.slice(-43)), "no token in any log line");
    });

    it("refuses a malformed Sec-WebSocket-Protocol with 400 in the envelope, with the request's id", async () => {
      // Left to ws, these would get a bare text/html 400 with no envelope, X-Request-ID or
      // Cache-Control.
      const mine = "abcdefabcdefabcdefabcdefabcdef34";
      for (const offered of ["orbit.events.v1, orbit.events.v1", "orbit.events.v1, @@", "orbit.events.v1,"]) {
        const raw = await new Promise<string>((resolve, reject) => {
          const sock = net.connect(node.port, "127.0.0.1", () => {
            sock.write(
              "GET /v1/events/connect HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
                `Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: ${offered}\r\n` +
                `Authorization: Bearer ${cred.token}\r\nX-Request-ID: ${mine}\r\n\r\n`,
            );
          });
          let out = "";
          sock.on("data", (d) => (out += d));
          sock.on("close", () => resolve(out));
          sock.on("error", reject);
        });
        assert.match(raw, /^HTTP\/1\.1 400 /, `${offered}: ${raw}`);
        assert.match(raw, new RegExp(`X-Request-ID: ${mine}\r\n`));
        assert.match(raw, /Cache-Control: no-store\r\n/);
        const body = JSON.parse(raw.slice(raw.indexOf("\r\n\r\n") + 4));
        assert.equal(body.request_id, mine);
        assert.equal(body.error.code, "INVALID_ARGUMENT");
      }
      // Logged as every other refusal: one line per request.
      const lines = node.lines.map((l) => JSON.parse(l)).filter((o) => o.msg === "request" && o.request_id === mine);
      assert.deepEqual(
        lines.map((o) => [o.route, o.status]),
        [
          ["connectEvents", 400],
          ["connectEvents", 400],
          ["connectEvents", 400],
        ],
      );
    });

    it("refuses connections beyond the node's maximum with 429 and Retry-After: 1", async () => {
      const many = await Promise.all(Array.from({ length: 6 }, () => conn()));
      const r = await expectRefusal({ token: cred.token }, 429, "CAPACITY_EXCEEDED");
      assert.equal(r.headers["retry-after"], "1");
      many[0]!.ws.terminate();
      await many[0]!.closed;
      await new Promise((res) => setTimeout(res, 100));
      assert.ok(await conn(), "a freed slot is usable again");
    });

    it("counts a connection it closed until the client answers the close: no more than the maximum open at once", async () => {
      // Were the count dropped when the node closes a connection, while its socket stays open
      // for ws's 30 s close timeout, a client that never answers the close (here: no hello,
      // closed after 400 ms) would hold 6 sockets more every 400 ms, past the limit of 6.
      const held: net.Socket[] = [];
      try {
        for (let i = 0; i < 6; i++) assert.match(await rawUpgrade("", held), /^HTTP\/1\.1 101 /);
        await new Promise((r) => setTimeout(r, 700)); // each gets 1008 for its missing hello, unanswered
        const r = await expectRefusal({ token: cred.token }, 429, "CAPACITY_EXCEEDED");
        assert.equal(r.headers["retry-after"], "1");
      } finally {
        for (const sock of held) sock.destroy();
      }
      await new Promise((r) => setTimeout(r, 150)); // the node sees the FINs
      assert.ok(await conn(), "the slots are free once the sockets are gone");
    });
  });

  describe("hello and welcome", () => {
    it("welcomes a valid hello: new message_id, reply_to, a server session_id, the figures, enabled", async () => {
      const s = await conn();
      const helloId = mid();
      s.send({
        protocol_version: "1",
        type: "events.hello",
        message_id: helloId,
        body: { subscription_id: sub, capacity: 3 },
      });
      const w = await s.nextOfType("events.welcome");
      assert.equal(w.reply_to, helloId);
      assert.notEqual(w.message_id, helloId);
      assert.match(w.session_id!, /^[0-9a-f]{32}$/);
      assert.deepEqual(Object.keys(w.body).sort(), [
        "capacity",
        "enabled",
        "heartbeat_interval_ms",
        "lease_duration_ms",
        "server_time",
        "session_id",
        "subscription_id",
      ]);
      assert.equal(w.body.session_id, w.session_id);
      assert.equal(w.body.subscription_id, sub);
      assert.equal(w.body.capacity, 3);
      assert.equal(w.body.lease_duration_ms, 30000);
      // This node's idle timeout is 1.5 s: it announces a quarter of it, not 15 s, so that a
      // client pinging as told is never cut as idle.
      assert.equal(w.body.heartbeat_interval_ms, 375);
      assert.equal(w.body.enabled, true);
      const c = await db.connect();
      try {
        const [rows] = await c.query<any[]>(
          "SELECT subscription_id, credential_id, capacity FROM event_sessions WHERE id = ?",
          [w.session_id],
        );
        assert.deepEqual(
          rows.map((r) => [r.subscription_id, r.credential_id, r.capacity]),
          [[sub, cred.credential_id, 3]],
          "capacity recorded in the database",
        );
      } finally {
        await c.end();
      }
      const other = await conn();
      const w2 = await other.hello(sub, 1);
      assert.notEqual(w2.session_id, w.session_id, "every connection gets its own session");
    });

    it("answers an invalid hello body with INVALID_ARGUMENT (reply_to, no session_id), then 1008", async () => {
      // Also a body that is not an object, or none: the envelope is valid, its body is not.
      const bodies = [
        { subscription_id: sub, capacity: 0 },
        { subscription_id: sub, capacity: 33 },
        { subscription_id: sub, capacity: 1.5 },
        { subscription_id: sub, capacity: "1" },
        { subscription_id: "nope", capacity: 1 },
        { subscription_id: sub },
        "x",
        [],
        null,
        1,
        undefined,
      ];
      for (const body of bodies) {
        const s = await conn();
        const id = mid();
        s.send({ protocol_version: "1", type: "events.hello", message_id: id, body });
        const e = await s.nextOfType("error");
        assert.equal(e.error!.code, "INVALID_ARGUMENT");
        assert.equal(e.reply_to, id);
        assert.equal(e.session_id, undefined);
        assert.equal(e.body, undefined);
        assert.equal((await s.closed).code, 1008);
      }
    });

    it("answers a hello for a subscription outside the caller's scope with NOT_FOUND, then closes", async () => {
      const peer = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
      for (const [token, target] of [
        [peer.token, sub],
        [cred.token, ID],
      ] as const) {
        const s = await conn({ token });
        const reply = await s.hello(target, 1);
        assert.equal(reply.type, "error");
        assert.equal(reply.error!.code, "NOT_FOUND");
        assert.equal(reply.session_id, undefined);
        assert.equal((await s.closed).code, 1008);
      }
    });

    it("checks the scope before the body: an invalid hello naming a subscription outside the scope is NOT_FOUND", async () => {
      const peer = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
      const cases = [
        [peer.token, { subscription_id: sub, capacity: 0 }],
        [cred.token, { subscription_id: ID, capacity: 33 }],
        [peer.token, { subscription_id: sub, capacity: 1, extra: true }],
      ] as const;
      for (const [token, body] of cases) {
        const s = await conn({ token });
        const id = mid();
        s.send({ protocol_version: "1", type: "events.hello", message_id: id, body });
        const e = await s.nextOfType("error");
        assert.equal(e.error!.code, "NOT_FOUND", JSON.stringify(body));
        assert.equal(e.reply_to, id);
        assert.equal(e.session_id, undefined);
        assert.equal((await s.closed).code, 1008);
      }
      // Its own subscription with the same bad body: the body's fault (the test above).
      const own = await conn();
      own.send({
        protocol_version: "1",
        type: "events.hello",
        message_id: mid(),
        body: { subscription_id: sub, capacity: 0 },
      });
      assert.equal((await own.nextOfType("error")).error!.code, "INVALID_ARGUMENT");
      assert.equal((await own.closed).code, 1008);
    });

    it("checks the subscription's queue scope at hello too, not only its owner: the owner without the queue gets NOT_FOUND, then closes", async () => {
      // Protocol §5: the hello then checks the subscription's owner and queue scope. No call
      // of the API narrows a credential, so its queue scope is changed by hand.
      const owner = await bootstrap(db.url, {
        namespace: "ns",
        application: "app",
        queues: ["kept", "dropped"],
        eventAccess: true,
      });
      const dropped = owner.queues[1]!.id; // "kept" stays in its scope
      const mine = (
        await client(node.url, owner.token).post("/v1/subscriptions", {
          name: `scoped-${Date.now()}`,
          queue_id: dropped,
        })
      ).json.data.subscription.id;
      const before = await conn({ token: owner.token });
      assert.equal((await before.hello(mine, 1)).type, "events.welcome", "in scope: welcomed");
      await db.query("DELETE FROM credential_queues WHERE credential_id = ? AND queue_id = ?", [
        owner.credential_id,
        dropped,
      ]);
      const s = await conn({ token: owner.token });
      const reply = await s.hello(mine, 1);
      assert.equal(reply.error?.code, "NOT_FOUND", JSON.stringify(reply));
      assert.equal(reply.session_id, undefined);
      assert.equal((await s.closed).code, 1008);
    });

    it("closes with 1008 when no hello comes in time", async () => {
      const s = await conn();
      const started = Date.now();
      assert.equal((await s.closed).code, 1008);
      assert.ok(Date.now() - started >= 350);
    });

    it("welcomes a hello sent in time even when binding it outlasts the hello deadline", async () => {
      // The hello timer stops when the hello arrives, not when the session row is written:
      // else a hello sent at once would be closed with 1008 "no hello in time" whenever the
      // insert waits longer than the deadline.
      const c = await db.connect();
      try {
        await c.query("LOCK TABLES event_sessions WRITE");
        const s = await conn();
        const answered = s.hello(sub, 1);
        await new Promise((r) => setTimeout(r, 700)); // the insert waits for the lock, past the 400 ms deadline
        await c.query("UNLOCK TABLES");
        const w = await Promise.race([answered, s.closed.then((x) => ({ type: `closed ${x.code} ${x.reason}` }))]);
        assert.equal(w.type, "events.welcome", JSON.stringify(w));
        assert.equal((await s.ping()).type, "ack", "and the connection stays");
      } finally {
        await c.query("UNLOCK TABLES");
        await c.end();
      }
    });

    it("records the close of a connection that leaves while its session is being written", async () => {
      // Its session row, inserted after the close, must not stay open (closed_at NULL) forever.
      const mine = (
        await client(node.url, cred.token).post("/v1/subscriptions", { name: "leaves", queue_id: cred.queues[0]!.id })
      ).json.data.subscription.id;
      const c = await db.connect();
      try {
        await c.query("LOCK TABLES event_sessions WRITE");
        const s = await conn();
        s.send({
          protocol_version: "1",
          type: "events.hello",
          message_id: mid(),
          body: { subscription_id: mine, capacity: 1 },
        });
        await new Promise((r) => setTimeout(r, 300)); // the insert waits for the lock
        s.ws.terminate();
        await s.closed;
        await new Promise((r) => setTimeout(r, 150)); // the node sees the FIN
        await c.query("UNLOCK TABLES");
        let rows: { closed_at: Date | null }[] = [];
        for (let i = 0; i < 40; i++) {
          [rows] = (await c.query("SELECT closed_at FROM event_sessions WHERE subscription_id = ?", [
            mine,
          ])) as unknown as [typeof rows];
          if (rows.length === 1 && rows[0]!.closed_at !== null) break;
          await new Promise((r) => setTimeout(r, 50));
        }
        assert.equal(rows.length, 1, "the session was written");
        assert.notEqual(rows[0]!.closed_at, null, "and its close recorded");
      } finally {
        await c.query("UNLOCK TABLES");
        await c.end();
      }
    });

    it("closes with 1008 on invalid envelopes: extra keys, duplicate keys, bad JSON, binary, a second hello", async () => {
      const cases: ((s: TestSocket) => void)[] = [
        (s) =>
          s.send({
            protocol_version: "1",
            type: "events.hello",
            message_id: mid(),
            session_id: ID,
            body: { subscription_id: sub, capacity: 1 },
          }),
        (s) =>
          s.send({
            protocol_version: "1",
            type: "events.hello",
            message_id: mid(),
            reply_to: ID,
            body: { subscription_id: sub, capacity: 1 },
          }),
        (s) =>
          s.send({
            protocol_version: "1",
            type: "events.hello",
            message_id: mid(),
            error: { code: "X", message: "x" },
            body: {},
          }),
        (s) =>
          s.send(
            `{"protocol_version":"1","type":"events.hello","message_id":"${mid()}","body":{"subscription_id":"${sub}","capacity":1,"capacity":2}}`,
          ),
        (s) => s.send("{not json"),
        (s) =>
          s.send({
            protocol_version: "2",
            type: "events.hello",
            message_id: mid(),
            body: { subscription_id: sub, capacity: 1 },
          }),
        (s) => s.send({ protocol_version: "1", type: "events.helo", message_id: mid(), body: {} }),
        (s) =>
          s.send({
            protocol_version: "1",
            type: "events.hello",
            message_id: "x",
            body: { subscription_id: sub, capacity: 1 },
          }),
        (s) => s.ws.send(Buffer.from("binary"), { binary: true }),
        (s) => s.send({ protocol_version: "1", type: "events.ping", message_id: mid(), session_id: ID, body: {} }),
      ];
      for (const send of cases) {
        const s = await conn();
        send(s);
        assert.equal((await s.closed).code, 1008);
        assert.equal(s.frames.length, 0, "no frame: the envelope itself was invalid");
      }
      const bound = await conn();
      await bound.hello(sub, 1);
      bound.send({
        protocol_version: "1",
        type: "events.hello",
        message_id: mid(),
        body: { subscription_id: sub, capacity: 1 },
      });
      assert.equal((await bound.closed).code, 1008, "a second hello");
      const wrong = await conn();
      await wrong.hello(sub, 1);
      wrong.send({ protocol_version: "1", type: "events.ping", message_id: mid(), session_id: ID, body: {} });
      assert.equal((await wrong.closed).code, 1008, "a wrong session_id");
    });

    it("closes a frame above 512 KiB with 1009", async () => {
      const s = await conn();
      await s.hello(sub, 1);
      s.send(
        `{"protocol_version":"1","type":"events.ping","message_id":"${mid()}","session_id":"${s.sessionId}","body":{},"pad":"${"x".repeat(512 * 1024)}"}`,
      );
      assert.equal((await s.closed).code, 1009);
    });
  });

  describe("heartbeats and idle", () => {
    it("answers ping with an ack {server_time, enabled} that follows pause and resume", async () => {
      const s = await conn();
      await s.hello(sub, 1);
      const a = await s.ping();
      assert.equal(a.type, "ack");
      assert.equal(a.session_id, s.sessionId);
      assert.deepEqual(Object.keys(a.body).sort(), ["enabled", "server_time"]);
      assert.equal(a.body.enabled, true);
      const api = client(node.url, cred.token);
      const cur = (await api.get(`/v1/subscriptions/${sub}`)).json.data;
      await api.post(`/v1/subscriptions/${sub}:configure`, {
        expected_revision: cur.revision,
        enabled: false,
        reason: "pause",
      });
      assert.equal((await s.ping()).body.enabled, false, "a paused subscription still connects and heartbeats");
      // Protocol §7: a paused subscription can still be connected to: a new connection is
      // welcomed, and told it is paused.
      const late = await conn();
      const w = await late.hello(sub, 1);
      assert.deepEqual([w.type, w.body?.enabled], ["events.welcome", false], JSON.stringify(w));
      assert.equal((await late.ping()).body.enabled, false);
      await api.post(`/v1/subscriptions/${sub}:configure`, {
        expected_revision: (BigInt(cur.revision) + 1n).toString(),
        enabled: true,
        reason: "resume",
      });
      assert.equal((await s.ping()).body.enabled, true);
    });

    it("answers a bad command body with INVALID_ARGUMENT and keeps the connection", async () => {
      const s = await conn();
      await s.hello(sub, 1);
      for (const body of [{ extra: 1 }, "x", null]) {
        const e = await s.request({ protocol_version: "1", type: "events.ping", session_id: s.sessionId, body });
        assert.equal(e.type, "error");
        assert.equal(e.error!.code, "INVALID_ARGUMENT");
        assert.equal(e.session_id, s.sessionId);
      }
      const bad = await s.ack({ delivery_id: ID, epoch: "1", lease_secret: "A".repeat(42) + "B" });
      assert.equal(bad.error!.code, "INVALID_ARGUMENT", "non-canonical base64url");
      // The message states the rule in words; the validator's own would quote the pattern (the
      // epoch's hundreds of characters, cut at 200).
      const rules: [Record<string, string>, RegExp][] = [
        [
          { delivery_id: ID, epoch: "01", lease_secret: "A".repeat(43) },
          /^epoch: must be a canonical decimal uint64 \(0 to 18446744073709551615;/,
        ],
        [
          { delivery_id: ID, epoch: "1", lease_secret: "x" },
          /^lease_secret: must be the lease_secret as event\.deliver gave it/,
        ],
        [
          { delivery_id: "X", epoch: "1", lease_secret: "A".repeat(43) },
          /^delivery_id: must be 32 lowercase hex characters$/,
        ],
      ];
      for (const [body, rule] of rules) {
        const e = await s.ack(body as never);
        assert.equal(e.error!.code, "INVALID_ARGUMENT");
        assert.match(e.error!.message, rule);
        assert.doesNotMatch(e.error!.message, /\[0-9|\^|\$/, "no pattern quoted");
      }
      assert.equal((await s.ping()).type, "ack", "still open");
    });

    it("re-checks the credential on ping: a revoked one gets UNAUTHENTICATED and the connection closes", async () => {
      const extra = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
      const mine = (
        await client(node.url, extra.token).post("/v1/subscriptions", {
          name: "revoked-sub",
          queue_id: extra.queues[0]!.id,
        })
      ).json.data.subscription.id;
      const s = await conn({ token: extra.token }, patient);
      await s.hello(mine, 1);
      assert.equal((await s.ping()).type, "ack");
      assert.equal(
        (await runCli(["revoke", "--credential", extra.credential_id], { ORBIT_DATABASE_URL: db.url })).code,
        0,
      );
      const e = await s.ping();
      assert.equal(e.error!.code, "UNAUTHENTICATED");
      assert.equal(e.session_id, s.sessionId);
      assert.equal((await s.closed).code, 1008);
    });

    it("re-checks the credential on hello: one revoked or cut down after the upgrade gets its error, no welcome and no session", async () => {
      // Protocol §7: UNAUTHENTICATED "when connected: error frame, then close"; the ping
      // re-checks it too. The upgrade's caller is not the hello's: the binding uses the
      // credential as it is.
      for (const code of ["UNAUTHENTICATED", "PERMISSION_DENIED"] as const) {
        const extra = await bootstrap(db.url, {
          namespace: "ns",
          application: "app",
          queues: [`hello-${code}`],
          eventAccess: true,
        });
        const mine = (
          await client(node.url, extra.token).post("/v1/subscriptions", {
            name: `hello-${code}`,
            queue_id: extra.queues[0]!.id,
          })
        ).json.data.subscription.id;
        const s = await conn({ token: extra.token }, patient);
        if (code === "UNAUTHENTICATED")
          assert.equal(
            (await runCli(["revoke", "--credential", extra.credential_id], { ORBIT_DATABASE_URL: db.url })).code,
            0,
          );
        else
          await db.query("UPDATE credentials SET actions = 'events:read,events:manage' WHERE id = ?", [
            extra.credential_id,
          ]);
        const reply = await s.hello(mine, 1);
        assert.equal(reply.error?.code, code, JSON.stringify(reply));
        assert.equal(reply.session_id, undefined);
        assert.equal((await s.closed).code, 1008);
        const rows = await db.query("SELECT COUNT(*) AS n FROM event_sessions WHERE subscription_id = ?", [mine]);
        assert.equal(Number(rows[0].n), 0, "no session was written");
      }
    });

    it("re-checks the action and the subscription's scope on ping, not only the credential: PERMISSION_DENIED / NOT_FOUND, then close", async () => {
      // Protocol §7: the server answers a ping and re-checks the credential and the
      // subscription's scope with it. No call of the API narrows a credential (re-binding
      // is not offered), so the rows are changed by hand.
      for (const [change, code] of [
        ["UPDATE credentials SET actions = 'events:read,events:manage' WHERE id = ?", "PERMISSION_DENIED"],
        ["DELETE FROM credential_queues WHERE credential_id = ?", "NOT_FOUND"],
      ] as const) {
        const extra = await bootstrap(db.url, {
          namespace: "ns",
          application: "app",
          queues: ["rechecked"],
          eventAccess: true,
        });
        const mine = (
          await client(node.url, extra.token).post("/v1/subscriptions", {
            name: `rechecked-${code}`,
            queue_id: extra.queues[0]!.id,
          })
        ).json.data.subscription.id;
        const s = await conn({ token: extra.token });
        await s.hello(mine, 1);
        assert.equal((await s.ping()).type, "ack");
        await db.query(change, [extra.credential_id]);
        const e = await s.ping();
        assert.equal(e.error?.code, code, JSON.stringify(e));
        assert.equal(e.session_id, s.sessionId);
        assert.equal((await s.closed).code, 1008);
      }
    });

    it("takes no ACK of a credential revoked while connected: UNAUTHENTICATED, close, the delivery stays LEASED", async () => {
      const extra = await bootstrap(db.url, {
        namespace: "ns",
        application: "app",
        queues: ["revoked-acks"],
        eventAccess: true,
      });
      const api = client(node.url, extra.token);
      const mine = (await api.post("/v1/subscriptions", { name: "revoked-acks", queue_id: extra.queues[0]!.id })).json
        .data.subscription.id;
      await cancelledResults(api, extra.queues[0]!.id, 1);
      const s = await conn({ token: extra.token }, patient);
      await s.hello(mine, 1);
      const d = await s.nextOfType("event.deliver", 5000);
      assert.equal(
        (await runCli(["revoke", "--credential", extra.credential_id], { ORBIT_DATABASE_URL: db.url })).code,
        0,
      );
      const e = await s.ack(d);
      assert.equal(e.error!.code, "UNAUTHENTICATED");
      assert.equal(e.session_id, s.sessionId);
      assert.equal((await s.closed).code, 1008);
      const c = await db.connect();
      try {
        const [[row]] = (await c.query("SELECT state, acknowledged_at FROM deliveries WHERE id = ?", [
          d.body.delivery.id,
        ])) as any;
        assert.deepEqual([row.state, row.acknowledged_at], ["LEASED", null]);
        const [audits] = (await c.query("SELECT id FROM audit_records WHERE delivery_id = ?", [
          d.body.delivery.id,
        ])) as any;
        assert.equal(audits.length, 0, "no audit record under the revoked credential");
      } finally {
        await c.end();
      }
    });

    it("counts only valid client frames against the idle timeout: neither deliveries sent nor invalid command bodies keep it open", async () => {
      // Protocol §7: receiving results does not replace the client's heartbeat; a connection
      // with no valid client frame read for 60 s is closed.
      const api = client(node.url, cred.token);
      const own = (await api.post("/v1/subscriptions", { name: `idle-${Date.now()}`, queue_id: cred.queues[0]!.id }))
        .json.data.subscription.id;
      const receiving = await conn();
      await receiving.hello(own, 32);
      const invalid = await conn();
      await invalid.hello(sub, 1);
      const bound = Date.now();
      let closed = false;
      void Promise.all([receiving.closed, invalid.closed]).then(() => (closed = true));
      // For 2.5 s (the idle timeout is 1.5 s): a result every 250 ms for `receiving`, which
      // never sends a frame; an invalid ping body every 250 ms from `invalid`.
      while (!closed && Date.now() - bound < 2500) {
        await cancelledResults(api, cred.queues[0]!.id, 1);
        if (invalid.ws.readyState === invalid.ws.OPEN)
          invalid.send({
            protocol_version: "1",
            type: "events.ping",
            message_id: mid(),
            session_id: invalid.sessionId,
            body: { extra: 1 },
          });
        await new Promise((r) => setTimeout(r, 250));
      }
      assert.ok(
        receiving.frames.filter((f) => f.type === "event.deliver").length >= 2,
        "results were being delivered while it stayed silent",
      );
      assert.ok(
        invalid.frames.filter((f) => f.error?.code === "INVALID_ARGUMENT").length >= 2,
        "its invalid frames were answered",
      );
      for (const s of [receiving, invalid]) {
        assert.equal((await s.closed).code, 1008);
      }
      assert.ok(Date.now() - bound < 2500, "both closed about an idle timeout after the welcome");
    });

    it("closes a connection with no valid client frame for the idle timeout", async () => {
      const s = await conn();
      await s.hello(sub, 1);
      await new Promise((r) => setTimeout(r, 800));
      await s.ping(); // a valid frame resets the clock
      const started = Date.now();
      assert.equal((await s.closed).code, 1008);
      assert.ok(Date.now() - started >= 1300, "closed an idle period after the last valid frame");
    });
  });
});

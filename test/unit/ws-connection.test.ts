// One event connection against a client that sends and never reads (docs/protocol.md §5:
// write queue 8 per connection), with a hand-written socket whose writes never flush and
// a database that answers the hello's statements (the credential, the subscription, the
// session): no real socket buffers between the node and the client, so what the node
// queued is counted exactly.
import { strict as assert } from "node:assert";
import { EventEmitter } from "node:events";
import type WebSocket from "ws";
import { issueToken, type Caller } from "../../src/domain/identity.js";
import type { Logger } from "../../src/log/index.js";
import { EventSession, type SessionDeps } from "../../src/ws/event-session.js";

const SUB = "1".repeat(32);
const QUEUE = "2".repeat(32);
const caller: Caller = {
  namespaceId: "3".repeat(32),
  applicationId: "4".repeat(32),
  credentialId: "5".repeat(32),
  actions: new Set(["events:consume"]),
  queues: new Map([[QUEUE, "q"]]),
};

/** A socket the client never reads from: every write stays unflushed until flush(). */
class UnreadSocket extends EventEmitter {
  readonly OPEN = 1;
  readyState = 1;
  isPaused = false;
  readonly sent: { type: string; reply_to?: string; session_id?: string }[] = [];
  private readonly callbacks: (() => void)[] = [];
  pause(): void {
    this.isPaused = true;
  }
  resume(): void {
    this.isPaused = false;
  }
  send(data: string, cb: () => void): void {
    this.sent.push(JSON.parse(data));
    this.callbacks.push(cb);
  }
  /** The client reads what was written so far. */
  flush(): void {
    for (const cb of this.callbacks.splice(0)) cb();
  }
  close(): void {
    this.readyState = 2;
  }
  terminate(): void {
    this.readyState = 3;
  }
  /** A text frame from the client. */
  frame(o: object): void {
    this.emit("message", Buffer.from(JSON.stringify(o)), false);
  }
}

const turns = async (n = 20): Promise<void> => {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
};

const mid = (i: number): string => i.toString(16).padStart(32, "0");

describe("an event connection whose client never reads", () => {
  let ws: UnreadSocket;
  let conn: EventSession;
  const lines: string[] = [];

  beforeEach(async () => {
    ws = new UnreadSocket();
    lines.length = 0;
    const log: Logger = { log: (level, msg, fields) => lines.push(JSON.stringify({ level, msg, ...fields })) };
    const row = {
      id: SUB,
      namespace_id: caller.namespaceId,
      credential_id: caller.credentialId,
      queue_id: QUEUE,
      enabled: 1,
      pending_count: 0,
    };
    // The hello authenticates the token again (as a ping does).
    const { token, digest } = issueToken(caller.credentialId);
    const credential = {
      id: caller.credentialId,
      namespace_id: caller.namespaceId,
      application_id: caller.applicationId,
      secret_digest: digest,
      actions: "events:consume",
      revoked_at: null,
      queue_id: QUEUE,
      queue_name: "q",
    };
    const pool = {
      query: async (sql: string) =>
        sql.includes("FROM subscriptions")
          ? [[row]]
          : sql.includes("FROM credentials")
            ? [[credential]]
            : [{ affectedRows: 1 }],
    };
    const deps = {
      pool,
      claimPool: pool,
      log,
      nodeId: "6".repeat(32),
      leaseDurationMs: 30000,
      helloTimeoutMs: 5000,
      idleTimeoutMs: 60000,
      recheckMs: 30000,
      scheduler: { request() {}, remove() {} },
      acks: {},
      onBound() {},
      onClosed() {},
    } as unknown as SessionDeps;
    conn = new EventSession(ws as unknown as WebSocket, caller, `Bearer ${token}`, deps);
    ws.frame({
      protocol_version: "1",
      type: "events.hello",
      message_id: mid(0),
      body: { subscription_id: SUB, capacity: 1 },
    });
    await turns();
    assert.equal(ws.sent[0]?.type, "events.welcome");
  });

  afterEach(() => {
    conn.close(1000, "done");
    ws.flush();
  });

  /** An ACK whose proof is not even base64url: answered at once with an error frame, no database. */
  const badAck = (i: number) => ({
    protocol_version: "1",
    type: "event.ack",
    message_id: mid(i),
    session_id: ws.sent[0]!.session_id,
    body: { delivery_id: SUB, epoch: "1", lease_secret: "!" },
  });

  it("starts no frame while 8 are unflushed, and reads on, in order, as they flush", async () => {
    // 100 frames in one chunk, as ws hands them over: with the welcome unflushed, only 7
    // are answered; the rest wait, and reading is paused.
    for (let i = 1; i <= 100; i++) ws.frame(badAck(i));
    await turns();
    assert.equal(ws.sent.length, 8, "replies stop at the write queue (§5: 写队列 8)");
    assert.ok(ws.isPaused, "reading is paused while the write queue is full");
    for (let n = 0; ws.sent.length < 101 && n < 50; n++) {
      ws.flush();
      await turns();
      assert.ok(ws.sent.length <= 101);
    }
    assert.deepEqual(
      ws.sent.slice(1).map((f) => f.reply_to),
      Array.from({ length: 100 }, (_, i) => mid(i + 1)),
      "every frame answered, in order",
    );
    assert.ok(ws.sent.slice(1).every((f) => f.type === "error"));
    ws.flush();
    await turns();
    assert.equal(ws.isPaused, false, "reading resumes once the writes flushed");
  });

  it("is terminated by the write timeout once, with one log line however many frames wait", async () => {
    for (let i = 1; i <= 20; i++) ws.frame(badAck(i));
    await turns();
    // Protocol §7: the write timeout is 5 s — not before 5 s, and by then.
    await new Promise((r) => setTimeout(r, 4700));
    assert.notEqual(ws.readyState, 3, "not terminated before the 5 s write timeout");
    await new Promise((r) => setTimeout(r, 600));
    assert.equal(ws.readyState, 3, "terminated");
    const cut = lines.filter((l) => l.includes("event connection terminated"));
    assert.equal(cut.length, 1, cut.join("\n"));
  });
});

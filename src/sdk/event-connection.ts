// One event connection (docs/protocol.md §5-7) for SDK users: upgrade with the subprotocol and the
// bearer header, hello → welcome, a ping every heartbeat_interval_ms, every event.deliver
// surfaced as a typed {delivery, event, proof}, and ack(proof) resolving with the ACK
// receipt or rejecting with an OrbitEventError carrying the protocol's code. Frames are
// checked against the generated validators in both directions.
import { requireSafeTransport } from "./transport.js";
import { EventEmitter } from "node:events";
import WebSocket from "ws";
import { randomHex } from "../wire/random-hex.js";
import type {
  AckReceipt,
  ClientFrame,
  EventDeliver,
  EventsWelcome,
  PingReply,
  ServerFrame,
} from "../../generated/ws/frames.js";
import type { EventDelivery, ResultEvent } from "./types.js";
import { OrbitEventError } from "./errors.js";
import { opened, parseServer, send } from "./frame-io.js";

export { OrbitEventError };

export const SUBPROTOCOL = "orbit.events.v1";

/** What proves a delivery when ACKing it: keep it until the ACK is confirmed. */
export interface Proof {
  readonly delivery_id: string;
  readonly epoch: string;
  readonly lease_secret: string;
}

export interface Delivery {
  readonly delivery: EventDelivery;
  readonly event: ResultEvent;
  readonly proof: Proof;
}

export type Welcome = EventsWelcome["body"];
export type { AckReceipt };

export interface EventConnectionOptions {
  readonly baseUrl: string;
  /** Send the token over plain ws:// to a host that is not loopback (default false: refused). */
  readonly allowInsecure?: boolean;
  readonly token: string;
  readonly subscriptionId: string;
  /** 1-32: how many deliveries this connection may hold. */
  readonly capacity: number;
  /** Send events.ping every heartbeat_interval_ms (default true). */
  readonly heartbeat?: boolean;
  /**
   * A ping unanswered this long — the heartbeat's or one of ping() — (default
   * heartbeat_interval_ms) means the peer or the path is gone without a close: the ping
   * rejects with CONNECTION_CLOSED and the socket is dropped (close 1006).
   */
  readonly pingTimeoutMs?: number;
  /**
   * An ack() unanswered this long (default 30000) is taken the same way: it rejects with
   * CONNECTION_CLOSED and the socket is dropped (close 1006). Whether the ACK landed is
   * unknown: keep the proof and send it again on the next connection (Consumer does).
   * Without a heartbeat nothing else would end the wait.
   */
  readonly ackTimeoutMs?: number;
  /**
   * The upgrade, and then the welcome answering the hello, each within this long (default
   * 10000): a node that takes the upgrade and never answers would otherwise hold open() —
   * and a consumer — for ever, as the heartbeat starts only with the welcome.
   */
  readonly connectTimeoutMs?: number;
  /**
   * Gives up open() while it waits (the upgrade or the welcome): the socket is dropped and
   * open() rejects with CONNECTION_CLOSED. Consumer.stop() uses it, so that a connection
   * still being opened does not hold stop() for up to connectTimeoutMs.
   */
  readonly signal?: AbortSignal;
}

export interface Closed {
  readonly code: number;
  readonly reason: string;
  /** The error frame that preceded the close, if any. */
  readonly error?: OrbitEventError;
}

const newId = () => randomHex(16);

/**
 * docs/protocol.md §5: each frame is at most 512 KiB, both ways (a node sizes its
 * event.deliver frames to fit). A larger one closes the connection with 1009 instead of
 * being buffered: ws's own default is 100 MiB.
 */
const MAX_FRAME_BYTES = 512 * 1024;

/**
 * ack()'s default deadline: above the longest a node takes to answer one — each statement
 * of its ACK transaction gets 10 s before the node gives its database connection up and
 * answers UNAVAILABLE — so that only a node or a path that is gone runs it out.
 */
const DEFAULT_ACK_TIMEOUT_MS = 30_000;

/** How long each kind of request waits for its answer. */
interface AnswerDeadlines {
  readonly "event.ack": number;
  readonly "events.ping": number;
}

/** Error codes after which the server closes the connection (docs/protocol.md §7 table). */
const CLOSING_CODES = new Set<string>([
  "UNAUTHENTICATED",
  "PERMISSION_DENIED",
  "NOT_FOUND",
  "EVENT_HISTORY_EXPIRED",
  "UNAVAILABLE",
  "INTERNAL",
]);

/**
 * Events: "delivery" (Delivery), "error-frame" (OrbitEventError, for errors that answer
 * no request), "close" (Closed).
 */
export class EventConnection extends EventEmitter {
  readonly welcome: Welcome;
  readonly closed: Promise<Closed>;
  private readonly pending = new Map<string, { resolve(f: ServerFrame): void; reject(e: unknown): void }>();
  private lastError: OrbitEventError | undefined;
  private heartbeat: NodeJS.Timeout | undefined;

  private constructor(
    private readonly ws: WebSocket,
    welcome: EventsWelcome,
    closed: Promise<Closed>,
    private readonly deadlines: AnswerDeadlines,
  ) {
    super();
    this.welcome = welcome.body;
    this.closed = closed;
  }

  static async open(o: EventConnectionOptions): Promise<EventConnection> {
    requireSafeTransport(o.baseUrl, o.allowInsecure);
    const url = `${o.baseUrl.replace(/^http/, "ws").replace(/\/+$/, "")}/v1/events/connect`;
    const connectTimeoutMs = o.connectTimeoutMs ?? 10000;
    if (o.signal?.aborted) throw new OrbitEventError("CONNECTION_CLOSED", "open() aborted");
    const ws = new WebSocket(url, [SUBPROTOCOL], {
      headers: { Authorization: `Bearer ${o.token}` },
      perMessageDeflate: false,
      maxPayload: MAX_FRAME_BYTES,
      handshakeTimeout: connectTimeoutMs,
    });
    // Dropped, the socket rejects whichever wait is on: the upgrade's or the welcome's.
    const abort = () => ws.terminate();
    o.signal?.addEventListener("abort", abort, { once: true });
    try {
      return await EventConnection.greet(ws, o, connectTimeoutMs);
    } finally {
      o.signal?.removeEventListener("abort", abort);
    }
  }

  /** The upgrade, the hello and its welcome; then the connection, its heartbeat started. */
  private static async greet(
    ws: WebSocket,
    o: EventConnectionOptions,
    connectTimeoutMs: number,
  ): Promise<EventConnection> {
    await opened(ws);
    let conn: EventConnection | undefined;
    const early: ServerFrame[] = [];
    const closed = new Promise<Closed>((resolve) =>
      ws.on("close", (code, reason) => {
        const c: Closed = { code, reason: reason.toString(), ...(conn?.lastError ? { error: conn.lastError } : {}) };
        conn?.shutdown(c);
        resolve(c);
      }),
    );
    ws.on("error", () => undefined); // surfaced through "close"
    const helloId = newId();
    let welcomeTimer: NodeJS.Timeout | undefined;
    const welcomed = new Promise<EventsWelcome>((resolve, reject) => {
      welcomeTimer = setTimeout(
        () => reject(new OrbitEventError("CONNECTION_CLOSED", `no welcome within ${connectTimeoutMs} ms`)),
        connectTimeoutMs,
      );
      ws.on("message", (data, isBinary) => {
        const f = parseServer(data as Buffer, isBinary);
        if (!f) return ws.close(1008, "invalid frame from the server");
        if (conn) return conn.onFrame(f);
        if (f.type === "events.welcome" && f.reply_to === helloId) return resolve(f);
        if (f.type === "error") return reject(new OrbitEventError(f.error.code, f.error.message));
        early.push(f);
      });
      void closed.then((c) =>
        reject(c.error ?? new OrbitEventError("CONNECTION_CLOSED", `closed ${c.code} before welcome`)),
      );
      send(ws, {
        protocol_version: "1",
        type: "events.hello",
        message_id: helloId,
        body: { subscription_id: o.subscriptionId, capacity: o.capacity },
      });
    });
    let welcome: EventsWelcome;
    try {
      welcome = await welcomed;
    } catch (e) {
      ws.terminate(); // no welcome: the connection is of no use, and nobody else would close it
      throw e;
    } finally {
      clearTimeout(welcomeTimer);
    }
    const interval = welcome.body.heartbeat_interval_ms;
    conn = new EventConnection(ws, welcome, closed, {
      "event.ack": o.ackTimeoutMs ?? DEFAULT_ACK_TIMEOUT_MS,
      "events.ping": o.pingTimeoutMs ?? interval,
    });
    if (o.heartbeat !== false) conn.heartbeat = setInterval(() => void conn!.heartbeatOnce(), interval);
    // Deliveries that raced the welcome are handed out once listeners can attach.
    setImmediate(() => early.forEach((f) => conn!.onFrame(f)));
    return conn;
  }

  get sessionId(): string {
    return this.welcome.session_id;
  }

  get isOpen(): boolean {
    return this.ws.readyState === WebSocket.OPEN;
  }

  /** ACKs a delivery; resolves with the receipt (deduplicated on a replay). */
  async ack(proof: Proof): Promise<AckReceipt> {
    const f = await this.request({
      type: "event.ack",
      body: { delivery_id: proof.delivery_id, epoch: proof.epoch, lease_secret: proof.lease_secret },
    });
    return f.body as AckReceipt;
  }

  async ping(): Promise<PingReply> {
    const f = await this.request({ type: "events.ping", body: {} });
    return f.body as PingReply;
  }

  // Without it a connection whose path went silent (no FIN: a dropped NAT entry, a frozen
  // node) would look open forever, and a consumer on it would never reconnect: a ping
  // unanswered within its deadline drops the socket (request).
  private async heartbeatOnce(): Promise<void> {
    try {
      await this.ping();
    } catch {
      /* a close is surfaced through "close" */
    }
  }

  /**
   * Closes with a close frame and resolves once the socket is closed. `timeoutMs`: drop the
   * socket if the peer has not answered the close by then — otherwise a peer that never
   * answers holds this for ws's closing timeout (30 s).
   */
  close(code = 1000, reason = "client closing", timeoutMs?: number): Promise<Closed> {
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING)
      this.ws.close(code, reason);
    if (timeoutMs !== undefined && this.ws.readyState !== WebSocket.CLOSED) {
      const timer = setTimeout(() => this.ws.terminate(), timeoutMs);
      void this.closed.then(() => clearTimeout(timer));
    }
    return this.closed;
  }

  /**
   * Sends a request and waits for its answer, at most its deadline. Unanswered by then,
   * the node or the path is gone without a close (a frozen node, a dropped NAT entry): the
   * request rejects, and the socket is dropped (close 1006), which rejects the others
   * waiting and tells a consumer to reconnect. Kept open, the connection would look alive
   * while nothing on it is answered.
   */
  private request(f: {
    type: "event.ack" | "events.ping";
    body: object;
  }): Promise<Extract<ServerFrame, { type: "ack" }>> {
    const id = newId();
    const timeoutMs = this.deadlines[f.type];
    return new Promise((resolve, reject) => {
      if (!this.isOpen) return reject(new OrbitEventError("CONNECTION_CLOSED", "the connection is closed"));
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new OrbitEventError("CONNECTION_CLOSED", `no answer to ${f.type} within ${timeoutMs} ms`));
        this.ws.terminate();
      }, timeoutMs);
      this.pending.set(id, {
        resolve: (reply) => {
          clearTimeout(timer);
          if (reply.type === "ack") resolve(reply);
          else reject(new OrbitEventError("PROTOCOL_ERROR", `unexpected ${reply.type}`));
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      try {
        send(this.ws, {
          protocol_version: "1",
          type: f.type,
          message_id: id,
          session_id: this.sessionId,
          body: f.body,
        } as ClientFrame);
      } catch (e) {
        this.pending.get(id)?.reject(e);
        this.pending.delete(id);
      }
    });
  }

  private onFrame(f: ServerFrame): void {
    if ("reply_to" in f && f.reply_to && this.pending.has(f.reply_to)) {
      const p = this.pending.get(f.reply_to)!;
      this.pending.delete(f.reply_to);
      if (f.type === "error") p.reject(new OrbitEventError(f.error.code, f.error.message));
      else p.resolve(f);
      if (f.type === "error" && CLOSING_CODES.has(f.error.code))
        this.lastError = new OrbitEventError(f.error.code, f.error.message);
      return;
    }
    if (f.type === "event.deliver") {
      const d = f as EventDeliver;
      const delivery: Delivery = {
        delivery: d.body.delivery as unknown as EventDelivery,
        event: d.body.event as unknown as ResultEvent,
        proof: {
          delivery_id: d.body.delivery.id,
          epoch: d.body.delivery.lease_epoch,
          lease_secret: d.body.lease_secret,
        },
      };
      this.emit("delivery", delivery);
      return;
    }
    if (f.type === "error") {
      this.lastError = new OrbitEventError(f.error.code, f.error.message);
      this.emit("error-frame", this.lastError);
    }
  }

  private shutdown(c: Closed): void {
    clearInterval(this.heartbeat);
    for (const p of this.pending.values())
      p.reject(c.error ?? new OrbitEventError("CONNECTION_CLOSED", `closed ${c.code}`));
    this.pending.clear();
    this.emit("close", c);
  }
}

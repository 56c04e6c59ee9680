// A raw event-protocol client for tests: real WebSocket connections to a real node,
// every server frame checked against the generated serverFrame validator.
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import WebSocket from "ws";
import * as frames from "../../generated/ws/validators.js";

const validServerFrame = (frames as unknown as Record<string, ((d: unknown) => boolean) & { errors?: unknown }>)
  .serverFrame!;

export const mid = (): string => randomBytes(16).toString("hex");

export interface Frame {
  type: string;
  message_id: string;
  reply_to?: string;
  session_id?: string;
  body?: any;
  error?: { code: string; message: string };
}

export interface UpgradeRefusal {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: any;
}

export class TestSocket {
  readonly frames: Frame[] = [];
  private waiters: { pred: (f: Frame) => boolean; resolve: (f: Frame) => void }[] = [];
  readonly closed: Promise<{ code: number; reason: string }>;
  sessionId = "";
  welcome: Frame | undefined;

  constructor(readonly ws: WebSocket) {
    ws.on("message", (data, isBinary) => {
      assert.equal(isBinary, false, "the server sends text frames only");
      const f = JSON.parse(data.toString()) as Frame;
      assert.ok(
        validServerFrame(f),
        `server frame breaks the contract: ${JSON.stringify(validServerFrame.errors)}\n${data}`,
      );
      this.frames.push(f);
      for (const w of [...this.waiters]) {
        if (w.pred(f)) {
          this.waiters.splice(this.waiters.indexOf(w), 1);
          w.resolve(f);
        }
      }
    });
    this.closed = new Promise((resolve) =>
      ws.on("close", (code, reason) => resolve({ code, reason: reason.toString() })),
    );
  }

  /** The next frame (already received or still to come) that matches, not consumed before. */
  next(pred: (f: Frame) => boolean = () => true, timeoutMs = 10000): Promise<Frame> {
    const seen = this.frames.find((f) => pred(f) && !(f as any).__taken);
    if (seen) {
      (seen as any).__taken = true;
      return Promise.resolve(seen);
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new Error(`no matching frame in ${timeoutMs} ms; got ${JSON.stringify(this.frames.map((f) => f.type))}`),
          ),
        timeoutMs,
      );
      this.waiters.push({
        pred,
        resolve: (f) => {
          clearTimeout(timer);
          (f as any).__taken = true;
          resolve(f);
        },
      });
    });
  }

  nextOfType(type: string, timeoutMs?: number): Promise<Frame> {
    return this.next((f) => f.type === type, timeoutMs);
  }

  send(frame: object | string): void {
    this.ws.send(typeof frame === "string" ? frame : JSON.stringify(frame));
  }

  /** Sends a request frame and waits for the frame that answers it. */
  async request(frame: Record<string, unknown>): Promise<Frame> {
    const id = (frame.message_id as string) ?? mid();
    this.send({ ...frame, message_id: id });
    return this.next((f) => f.reply_to === id);
  }

  async hello(subscriptionId: string, capacity: number): Promise<Frame> {
    const reply = await this.request({
      protocol_version: "1",
      type: "events.hello",
      body: { subscription_id: subscriptionId, capacity },
    });
    if (reply.type === "events.welcome") {
      this.sessionId = reply.session_id!;
      this.welcome = reply;
    }
    return reply;
  }

  ping(): Promise<Frame> {
    return this.request({ protocol_version: "1", type: "events.ping", session_id: this.sessionId, body: {} });
  }

  ack(deliver: Frame | { delivery_id: string; epoch: string; lease_secret: string }): Promise<Frame> {
    const body =
      "body" in deliver && deliver.body?.delivery
        ? {
            delivery_id: deliver.body.delivery.id,
            epoch: deliver.body.delivery.lease_epoch,
            lease_secret: deliver.body.lease_secret,
          }
        : deliver;
    return this.request({ protocol_version: "1", type: "event.ack", session_id: this.sessionId, body });
  }

  close(): void {
    this.ws.close(1000);
  }
}

export interface ConnectOptions {
  readonly token?: string;
  readonly protocol?: string | null;
  readonly headers?: Record<string, string>;
  readonly path?: string;
  readonly perMessageDeflate?: boolean;
}

/** Opens an event connection; rejects with the HTTP refusal when the upgrade is refused. */
export function connect(baseUrl: string, o: ConnectOptions = {}): Promise<TestSocket> {
  const url = baseUrl.replace(/^http/, "ws") + (o.path ?? "/v1/events/connect");
  const headers: Record<string, string> = { ...(o.headers ?? {}) };
  if (o.token) headers.Authorization = `Bearer ${o.token}`;
  const protocol = o.protocol === undefined ? "orbit.events.v1" : o.protocol;
  const ws = new WebSocket(url, protocol === null ? [] : [protocol], {
    headers,
    perMessageDeflate: o.perMessageDeflate ?? false,
  });
  return new Promise((resolve, reject) => {
    const socket = new TestSocket(ws);
    ws.once("open", () => resolve(socket));
    ws.once("unexpected-response", (_req, res) => {
      let text = "";
      res.on("data", (d) => (text += d));
      res.on("end", () => {
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          body = text;
        }
        reject(
          Object.assign(new Error(`upgrade refused: ${res.statusCode}`), {
            refusal: { status: res.statusCode, headers: res.headers, body },
          }),
        );
      });
    });
    ws.once("error", (e) => reject(e));
  });
}

export async function refusal(p: Promise<unknown>): Promise<UpgradeRefusal> {
  try {
    await p;
  } catch (e) {
    const r = (e as { refusal?: UpgradeRefusal }).refusal;
    if (r) return r;
    throw e;
  }
  throw new Error("the upgrade was accepted");
}

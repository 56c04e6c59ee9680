// The protocol example over raw `ws` (docs/protocol.md §5-7): receive a delivery, ACK it, drop the
// connection before reading the reply, reconnect with a new session and re-send the
// same ACK: the answer is deduplicated=true with the original acknowledged_at.
// Run: npm run example:protocol (next to a running node).
import { randomBytes } from "node:crypto";
import WebSocket from "ws";
import { produce, say, setup } from "./lib/setup.js";

const { baseUrl, token, queueId, client } = setup("protocol");
const id = () => randomBytes(16).toString("hex");
const sub = await client.createSubscription(`protocol-${id()}`, {
  name: `protocol-${id().slice(0, 8)}`,
  queue_id: queueId,
});
await produce(client, queueId, 1, "protocol");

// Every wait ends: with the frame it waits for, or — an unexpected answer — with an error
// frame, the connection's close, or after WAIT_MS; each of those throws and exits 1.
const WAIT_MS = 10_000;

interface Waiter {
  readonly type: string;
  resolve(f: any): void;
  reject(e: Error): void;
}

function open(): Promise<{ ws: WebSocket; next: (type: string) => Promise<any> }> {
  const ws = new WebSocket(`${baseUrl.replace(/^http/, "ws")}/v1/events/connect`, ["orbit.events.v1"], {
    headers: { Authorization: `Bearer ${token}` },
    // docs/protocol.md §5: no compression (ws offers permessage-deflate unless told not to;
    // the node would decline it), and frames of at most 512 KiB.
    perMessageDeflate: false,
    maxPayload: 512 * 1024,
    handshakeTimeout: WAIT_MS,
  });
  const frames: any[] = [];
  const waiters = new Set<Waiter>();
  let ended: Error | undefined;
  const fail = (e: Error) => {
    ended ??= e;
    for (const w of waiters) w.reject(ended);
    waiters.clear();
  };
  ws.on("message", (data) => {
    let f: any;
    try {
      f = JSON.parse(data.toString());
    } catch {
      return fail(new Error("the node sent a frame that is not JSON"));
    }
    say(`<< ${f.type}${f.error ? ` ${f.error.code}` : ""}`);
    if (f.type === "error")
      return fail(new Error(`the node answered an error frame: ${f.error?.code} ${f.error?.message}`));
    const w = [...waiters].find((x) => x.type === f.type);
    if (w) {
      waiters.delete(w);
      w.resolve(f);
    } else frames.push(f);
  });
  ws.on("close", (code, reason) =>
    fail(new Error(`the connection closed (${code}${reason.length ? ` ${reason}` : ""})`)),
  );
  ws.on("error", (e) => fail(e));
  const next = (type: string) =>
    new Promise<any>((resolve, reject) => {
      const i = frames.findIndex((f) => f.type === type);
      if (i >= 0) return resolve(frames.splice(i, 1)[0]);
      if (ended) return reject(new Error(`waiting for ${type}: ${ended.message}`));
      const timer = setTimeout(() => {
        waiters.delete(w);
        reject(new Error(`no ${type} within ${WAIT_MS} ms`));
      }, WAIT_MS);
      const w: Waiter = {
        type,
        resolve: (f) => {
          clearTimeout(timer);
          resolve(f);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(new Error(`waiting for ${type}: ${e.message}`));
        },
      };
      waiters.add(w);
    });
  return new Promise((resolve, reject) => {
    ws.once("open", () => resolve({ ws, next }));
    ws.once("error", reject); // a refused upgrade or the handshake timeout: "close" follows
  });
}

// 1. Connect, hello, receive the delivery.
const first = await open();
first.ws.send(
  JSON.stringify({
    protocol_version: "1",
    type: "events.hello",
    message_id: id(),
    body: { subscription_id: sub.subscription.id, capacity: 1 },
  }),
);
const welcome = await first.next("events.welcome");
say(`session ${welcome.session_id}`);
const deliver = await first.next("event.deliver");
const proof = {
  delivery_id: deliver.body.delivery.id,
  epoch: deliver.body.delivery.lease_epoch,
  lease_secret: deliver.body.lease_secret,
};
say(
  `delivery ${proof.delivery_id} epoch ${proof.epoch} for event ${deliver.body.event.id} (${deliver.body.event.type})`,
);

// 2. A walk through the protocol, not a receiver: it saves nothing, so it must not be
//    copied as one. A receiver saves the result under event.id durably first and ACKs
//    after (examples/inbox). ACK, and drop the connection before
//    reading the reply: stop reading, give the node a moment to commit, then cut.
first.ws.removeAllListeners("message"); // the reply will not be read
(first.ws as unknown as { _socket: { pause(): void } })._socket.pause();
first.ws.send(
  JSON.stringify({
    protocol_version: "1",
    type: "event.ack",
    message_id: id(),
    session_id: welcome.session_id,
    body: proof,
  }),
);
await new Promise((r) => setTimeout(r, 300));
first.ws.terminate();
say("connection dropped before the ACK's reply was read");

// 3. A new connection, a new session, the SAME proof.
const second = await open();
second.ws.send(
  JSON.stringify({
    protocol_version: "1",
    type: "events.hello",
    message_id: id(),
    body: { subscription_id: sub.subscription.id, capacity: 1 },
  }),
);
const welcome2 = await second.next("events.welcome");
say(`new session ${welcome2.session_id}`);
const ackId = id();
second.ws.send(
  JSON.stringify({
    protocol_version: "1",
    type: "event.ack",
    message_id: ackId,
    session_id: welcome2.session_id,
    body: proof,
  }),
);
const ack = await second.next("ack");
if (ack.reply_to !== ackId) throw new Error(`the ack answers ${ack.reply_to}, not the re-sent ACK ${ackId}`);
const detail = await client.getEventDelivery(sub.subscription.id, proof.delivery_id);
say(`re-sent ACK: deduplicated=${ack.body.deduplicated} acknowledged_at=${ack.body.acknowledged_at}`);
say(`delivery state ${detail.delivery.state}, acknowledged_at ${detail.delivery.acknowledged_at} (the original)`);
second.ws.close(1000);
if (!ack.body.deduplicated || ack.body.acknowledged_at !== detail.delivery.acknowledged_at) {
  say("the re-sent ACK was not deduplicated with the original acknowledged_at");
  process.exitCode = 1;
}

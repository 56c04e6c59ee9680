// `peer.jetstream`: the same 20,000-message backlog drain as `orbit.drain`, through a peer
// broker with the same guarantees asked of it — a durable pull consumer, explicit ACKs whose
// receipt the server confirms ("double ack", like Orbit's confirmed ACK), at most 64 messages
// delivered and not yet ACKed.
//
// One caveat for the ratio: JetStream's file store does not fsync each write by default (it
// syncs on an interval), while MariaDB here fsyncs every commit.
import { randomBytes } from "node:crypto";
import { connect as tcpConnect } from "node:net";
import { AckPolicy, connect, StorageType } from "nats";
import type { JetStreamClient, NatsConnection } from "nats";
import { cpuSeconds, type BenchOptions } from "./common.js";

const HOST = "127.0.0.1";
const PORT = 4222;
const SERVER = `nats://${HOST}:${PORT}`;
/** orbit.drain's size; the quick run drains the same 20,000. */
const MESSAGES = 20_000;
const OUTSTANDING = 64;
/** 1 KiB, about the size of a result event frame. */
const PAYLOAD = Buffer.from(randomBytes(512).toString("hex"));

export interface JetStreamResult {
  /** ACK-confirmed messages per second while draining; the publish is not timed here. */
  messagesPerSec: number;
  messages: number;
  outstanding: number;
  /** The drain's wall time. */
  seconds: number;
  /** CPU seconds this process (the client) used during the drain. */
  cpuSeconds: number;
  /** Filling the backlog: acknowledged publishes per second, 64 in flight. */
  publishPerSec: number;
}

export async function measureJetStream(_o: BenchOptions): Promise<JetStreamResult | { skipped: string }> {
  // Probed with a plain socket first (a NATS server greets with INFO at once): when something
  // accepts the connection but never greets, the client's connect timeout gives up after 2 s
  // but leaves its socket open, holding the process ~10 s more.
  if (!(await natsGreets(HOST, PORT, 2_000))) return { skipped: `no NATS server answered on ${SERVER} within 2 s` };
  let nc: NatsConnection;
  try {
    // noAsyncTraces: the client's README says it "will greatly improve performance of
    // request/reply and JetStream publishers" (each ackAck() is a request); it only drops
    // extra error context, no guarantee, and makes the drain and the publish markedly faster.
    nc = await connect({ servers: SERVER, timeout: 2_000, reconnect: false, noAsyncTraces: true });
  } catch (e) {
    return { skipped: `no NATS server answered on ${SERVER} within 2 s (${(e as Error).message})` };
  }
  const name = `ORBIT_BENCH_${process.pid}_${Date.now()}`;
  const subject = `orbit.bench.${process.pid}.${Date.now()}`;
  let created = false;
  try {
    const jsm = await nc.jetstreamManager().catch((e: Error) => e);
    if (jsm instanceof Error) return { skipped: `NATS answers on ${SERVER} but JetStream does not (${jsm.message})` };
    await jsm.streams.add({ name, subjects: [subject], storage: StorageType.File });
    created = true;
    const js = nc.jetstream();

    const p0 = performance.now();
    await publishAll(js, subject);
    const publishPerSec = MESSAGES / ((performance.now() - p0) / 1000);

    // max_ack_pending is the server-side bound on outstanding messages; consume() pulls in
    // batches of the same size and refills as messages are taken.
    await jsm.consumers.add(name, {
      durable_name: "drain",
      ack_policy: AckPolicy.Explicit,
      max_ack_pending: OUTSTANDING,
    });
    const consumer = await js.consumers.get(name, "drain");

    const t0 = performance.now();
    const c0 = cpuSeconds();
    const messages = await consumer.consume({ max_messages: OUTSTANDING });
    let deadline: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve, reject) => {
      // A stalled drain fails the measurement instead of hanging the whole benchmark.
      deadline = setTimeout(() => reject(new Error("peer.jetstream: the drain took over 120 s")), 120_000);
      let confirmed = 0;
      void (async () => {
        for await (const m of messages) {
          // Not awaited here: the next message is taken while this ACK's confirmation is on
          // its way; the server keeps at most 64 delivered and unconfirmed.
          m.ackAck().then((ok) => {
            if (!ok) return reject(new Error("peer.jetstream: an ACK was not confirmed"));
            if (++confirmed === MESSAGES) resolve();
          }, reject);
        }
      })().catch(reject);
    }).finally(() => clearTimeout(deadline));
    const seconds = (performance.now() - t0) / 1000;
    const cpu = cpuSeconds() - c0;
    messages.stop();
    return {
      messagesPerSec: MESSAGES / seconds,
      messages: MESSAGES,
      outstanding: OUTSTANDING,
      seconds,
      cpuSeconds: cpu,
      publishPerSec,
    };
  } finally {
    if (created) await (await nc.jetstreamManager()).streams.delete(name).catch(() => undefined);
    await nc.close();
  }
}

/** Publishes MESSAGES with publish acks (each one stored before it counts), 64 in flight. */
async function publishAll(js: JetStreamClient, subject: string): Promise<void> {
  let sent = 0;
  await Promise.all(
    Array.from({ length: OUTSTANDING }, async () => {
      while (sent < MESSAGES) {
        sent++;
        await js.publish(subject, PAYLOAD);
      }
    }),
  );
}

/** Whether a NATS server greets (INFO) on host:port within `ms`; the socket is always closed. */
function natsGreets(host: string, port: number, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = tcpConnect({ host, port });
    const done = (ok: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), ms);
    socket.once("data", (chunk: Buffer) => done(chunk.subarray(0, 4).toString() === "INFO"));
    socket.once("error", () => done(false));
  });
}

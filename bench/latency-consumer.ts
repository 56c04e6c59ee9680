// orbit.latency's consumer, in a process of its own (bench/orbit.ts forks one per
// consumer): it times commit → delivery for each event and ACKs it. In the producers'
// process a delivery could wait behind their HTTP answers before it was timed; here its
// own loop does nothing else (its delay is reported, the 5 ms sampling interval taken
// off — common.ts loopDelay).
//
// IPC: argv = [baseUrl, token, subscriptionId]; sends {type: "ready"} once connected and
// {type: "received", n} every 100 ms; takes {type: "measure-from", at} (ms since the
// epoch: events that occurred before it are not timed) and {type: "report"}, answered by
// {type: "report", samples, received, loopDelayMs}, then closes and exits.
import { EventConnection } from "../src/sdk/index.js";
import { loopDelay } from "./common.js";

export type ConsumerMessage =
  | { type: "ready" }
  | { type: "received"; n: number }
  | { type: "report"; samples: number[]; received: number; loopDelayMs: { p50: number; p99: number; max: number } };
export type ConsumerCommand = { type: "measure-from"; at: number } | { type: "report" };

const [baseUrl, token, subscriptionId] = process.argv.slice(2) as [string, string, string];
const send = (m: ConsumerMessage) => process.send!(m);

const samples: number[] = [];
let received = 0;
let measureFrom = Infinity;
const loop = loopDelay();

const conn = await EventConnection.open({ baseUrl, token, subscriptionId, capacity: 32, heartbeat: false });
conn.on("delivery", (d) => {
  // occurred_at is set inside the committing transaction, on this machine's clock.
  const occurred = Date.parse(d.event.occurred_at);
  received++;
  if (occurred >= measureFrom) samples.push(Date.now() - occurred);
  conn
    .ack(d.proof)
    .catch((e: unknown) => process.stderr.write(`bench consumer: ack failed: ${(e as Error).message}\n`));
});
const ticker = setInterval(() => send({ type: "received", n: received }), 100);

process.on("message", (m: ConsumerCommand) => {
  if (m.type === "measure-from") measureFrom = m.at;
  if (m.type === "report") {
    clearInterval(ticker);
    send({ type: "report", samples, received, loopDelayMs: loop.read() });
    void conn.close().finally(() => process.disconnect());
  }
});
send({ type: "ready" });

// The pipeline's subscriber, in a process of its own (bench/pipeline.ts forks one): the
// SDK's Consumer, as an application would run it, with a handler that notes when each
// task's result arrived and resolves at once, so the Consumer ACKs every delivery. In its
// own process its CPU is its own line in the figures, and the producers' and workers'
// HTTP answers never hold a delivery back before it is timed.
//
// IPC: argv = [baseUrl, token, subscriptionId]. Takes {type: "expect", n}: from then on it
// counts distinct tasks (event.aggregate_id) and answers {type: "expecting"}; once n of
// them arrived and no ACK is left unconfirmed it sends {type: "done", lastAckAt, delivered}
// (delivered: [task id, ms since the epoch] of each task's first delivery). Takes
// {type: "stop"}: stops the Consumer and exits.
import { Consumer } from "../src/sdk/index.js";

export type PipelineConsumerCommand = { type: "expect"; n: number } | { type: "stop" };
export type PipelineConsumerMessage =
  { type: "expecting" } | { type: "done"; lastAckAt: number; delivered: [string, number][]; duplicates: number };

const [baseUrl, token, subscriptionId] = process.argv.slice(2) as [string, string, string];
const send = (m: PipelineConsumerMessage) => process.send!(m);

let delivered = new Map<string, number>();
let duplicates = 0;
let expected = Infinity;

const consumer = new Consumer({
  baseUrl,
  token,
  subscriptionId,
  // The protocol's largest: the subscriber is never the narrow part of the pipeline.
  capacity: 32,
  handler: async (event) => {
    const at = Date.now();
    if (delivered.has(event.aggregate_id)) duplicates++;
    else delivered.set(event.aggregate_id, at);
    if (delivered.size === expected) {
      expected = Infinity;
      void whenAcked();
    }
  },
  onError: (e) => process.stderr.write(`bench pipeline consumer: ${(e as Error).message}\n`),
}).start();

// The last delivery counts once its ACK is confirmed: the Consumer ACKs after the handler
// resolves, so this waits until no proof is left unconfirmed — from the next turn of the
// loop on, when the last handler's proof has been kept and its ACK sent.
async function whenAcked(): Promise<void> {
  await new Promise((r) => setTimeout(r, 0));
  while (consumer.pendingAcks > 0) await new Promise((r) => setTimeout(r, 1));
  const lastAckAt = Date.now();
  send({ type: "done", lastAckAt, delivered: [...delivered], duplicates });
}

process.on("message", (m: PipelineConsumerCommand) => {
  if (m.type === "expect") {
    delivered = new Map();
    duplicates = 0;
    expected = m.n;
    send({ type: "expecting" });
  }
  if (m.type === "stop") void consumer.stop({ deadlineMs: 5000 }).finally(() => process.disconnect());
});

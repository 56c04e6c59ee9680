// One command for the Inbox example: create a subscription, produce results, run the
// Inbox consumer as a child process, kill it (SIGKILL) halfway, start it again, and show
// that every event is in the inbox once and its effect was applied once.
// Run: npm run example:inbox (next to a running node).
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { produce, say, setup } from "../lib/setup.js";
import { openInbox } from "./consumer.js";

const RESULTS = Number(process.env.RESULTS ?? 40);
const { baseUrl, token, queueId, client } = setup("inbox");
const run = Date.now().toString(36);
const sub = await client.createSubscription(`inbox-${run}`, { name: `inbox-${run}`, queue_id: queueId });
const inboxUrl = process.env.INBOX_DATABASE_URL ?? `mysql://root@127.0.0.1:3306/orbit_inbox_${run}`;
const inbox = await openInbox(inboxUrl);
const consumerJs = path.join(path.dirname(fileURLToPath(import.meta.url)), "consumer.js");
const start = (): ChildProcess =>
  spawn(process.execPath, [consumerJs], {
    env: {
      ...process.env,
      ORBIT_URL: baseUrl,
      ORBIT_TOKEN: token,
      SUBSCRIPTION_ID: sub.subscription.id,
      INBOX_DATABASE_URL: inboxUrl,
    },
    stdio: ["ignore", "inherit", "inherit"],
  });
const count = async () => Number(((await inbox.query("SELECT COUNT(*) AS n FROM inbox"))[0] as { n: number }[])[0]!.n);

/**
 * Every wait ends (examples/README: "exit 1 if any event is missing"): the inbox reaches n,
 * or the consumer exits first, or the deadline passes — so a dead consumer or a lost
 * event cannot keep the demo polling for ever. The deadline leaves room for the leases the
 * killed consumer held (30 s by default) to run out and come back.
 */
const DEADLINE_MS = Number(process.env.INBOX_DEADLINE_MS ?? 120_000);
async function reaches(n: number, counted: () => Promise<number>, what: string, consumer: ChildProcess): Promise<void> {
  const deadline = Date.now() + DEADLINE_MS;
  for (let have = await counted(); have < n; have = await counted()) {
    if (consumer.exitCode !== null || consumer.signalCode !== null) {
      throw new Error(`the consumer exited (${consumer.exitCode ?? consumer.signalCode}) with ${have} of ${n} ${what}`);
    }
    if (Date.now() > deadline) throw new Error(`${have} of ${n} ${what} after ${DEADLINE_MS} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
const inboxReaches = (n: number, consumer: ChildProcess) => reaches(n, count, "events in the inbox", consumer);

/**
 * The node has every delivery ACKED (at most 100 listed). An event the killed consumer
 * applied but never got to ACK is in the inbox already: it comes back when its lease runs
 * out, the inbox skips it, and only then is it ACKED. Stopping the consumer as soon as the
 * inbox is full would leave that one un-ACKed.
 */
const ackedCount = async () =>
  (await client.listEventDeliveries(sub.subscription.id, { state: "ACKED", limit: 100 })).items.length;
const ackedReaches = (n: number, consumer: ChildProcess) => reaches(n, ackedCount, "deliveries ACKED", consumer);

/** Stops a consumer that still runs; one that already exited has nothing to wait for. */
async function stop(consumer: ChildProcess, signal: NodeJS.Signals): Promise<void> {
  if (consumer.exitCode !== null || consumer.signalCode !== null) return;
  const exited = once(consumer, "exit");
  consumer.kill(signal);
  await exited;
}

let child = start();
try {
  await produce(client, queueId, RESULTS, "inbox");
  await inboxReaches(RESULTS / 2, child);
  await stop(child, "SIGKILL");
  say(`-- killed the consumer with SIGKILL at ${await count()} events; starting it again --`);
  child = start();
  await inboxReaches(RESULTS, child);
  await ackedReaches(Math.min(RESULTS, 100), child);
  await stop(child, "SIGTERM");
  const [totals] = await inbox.query("SELECT state, n FROM outcome_totals ORDER BY state");
  const sum = (totals as { n: number }[]).reduce((a, t) => a + Number(t.n), 0);
  say(`inbox: ${await count()} events; effects applied: ${sum} (${JSON.stringify(totals)})`);
  const acked = await ackedCount();
  say(`deliveries ACKED: ${acked} of ${RESULTS}`);
  if (sum !== RESULTS || acked !== Math.min(RESULTS, 100)) process.exitCode = 1;
} catch (e) {
  say(`inbox demo failed: ${(e as Error).message}`);
  process.exitCode = 1;
} finally {
  await stop(child, "SIGKILL");
  if (!process.env.INBOX_DATABASE_URL) await inbox.query(`DROP DATABASE \`orbit_inbox_${run}\``);
  await inbox.end();
}

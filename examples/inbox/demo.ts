// One command for the Inbox example: create a subscription, produce results, run the
// Inbox consumer as a child process, kill it (SIGKILL) halfway, start it again, and show
// that every event is in the inbox once and its effect was applied once.
// Run: npm run example:inbox (next to a running node).
import { spawn, type ChildProcess } from "node:child_process";
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
    env: { ...process.env, ORBIT_URL: baseUrl, ORBIT_TOKEN: token, SUBSCRIPTION_ID: sub.subscription.id, INBOX_DATABASE_URL: inboxUrl },
    stdio: ["ignore", "inherit", "inherit"],
  });
const count = async () => Number(((await inbox.query("SELECT COUNT(*) AS n FROM inbox"))[0] as { n: number }[])[0]!.n);

let child = start();
await produce(client, queueId, RESULTS, "inbox");
while ((await count()) < RESULTS / 2) await new Promise((r) => setTimeout(r, 50));
child.kill("SIGKILL");
say(`-- killed the consumer with SIGKILL at ${await count()} events; starting it again --`);
child = start();
while ((await count()) < RESULTS) await new Promise((r) => setTimeout(r, 100));
child.kill("SIGTERM");
await new Promise((r) => child.once("exit", r));
const [totals] = await inbox.query("SELECT state, n FROM outcome_totals ORDER BY state");
const sum = (totals as { n: number }[]).reduce((a, t) => a + Number(t.n), 0);
say(`inbox: ${await count()} events; effects applied: ${sum} (${JSON.stringify(totals)})`);
const acked = (await client.listEventDeliveries(sub.subscription.id, { state: "ACKED", limit: 100 })).items.length;
say(`deliveries ACKED: ${acked} of ${RESULTS}`);
if (!process.env.INBOX_DATABASE_URL) await inbox.query(`DROP DATABASE \`orbit_inbox_${run}\``);
await inbox.end();
if (sum !== RESULTS || acked !== Math.min(RESULTS, 100)) process.exitCode = 1;

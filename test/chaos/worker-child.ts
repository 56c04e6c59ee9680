// An SDK Worker in a process of its own, so that the chaos run can SIGKILL or SIGSTOP it
// between a claim and its completion. Every task's outcome follows from its id
// (outcomeOf), so the checker knows what each completed task must read.
// Environment: ORBIT_URL, ORBIT_TOKEN, QUEUE_ID.
import { Worker } from "../../src/sdk/index.js";
import { outcomeOf } from "./outcome.js";

const { ORBIT_URL, ORBIT_TOKEN, QUEUE_ID } = process.env;
if (!ORBIT_URL || !ORBIT_TOKEN || !QUEUE_ID) throw new Error("set ORBIT_URL, ORBIT_TOKEN and QUEUE_ID");

const worker = new Worker({
  baseUrl: ORBIT_URL,
  token: ORBIT_TOKEN,
  queueId: QUEUE_ID,
  concurrency: 8,
  waitMs: 1000,
  backoff: { initialMs: 50, maxMs: 1000 },
  onError: (e) => process.stderr.write(`worker: ${e instanceof Error ? e.message : String(e)}\n`),
  handler: async (task) => {
    await new Promise((r) => setTimeout(r, Math.random() * 20));
    return outcomeOf(task.id);
  },
}).start();
process.stdout.write(`working queue ${QUEUE_ID}\n`);

process.once("SIGTERM", () => void worker.stop({ deadlineMs: 3000 }));
const end = await worker.done;
if (!end.stopped) {
  process.stderr.write(`worker stopped: ${end.error.message}\n`);
  process.exitCode = 1;
}

// A user's application behind the balancer, run by test/deploy/balancer.test.ts in a
// process of its own with the test's certificate authority in NODE_EXTRA_CA_CERTS, as a
// user trusts a private CA: it creates a subscription and submits TASKS tasks over HTTPS,
// runs them with the SDK's Worker and consumes their results with its Consumer over WSS,
// all through ORBIT_URL. It prints one JSON line per result event it receives and exits 0
// once it has a result for every task it submitted.
import { Consumer, OrbitApiError, OrbitClient, OrbitNetworkError, Worker } from "../../src/sdk/index.js";

const baseUrl = process.env.ORBIT_URL!;
const token = process.env.ORBIT_TOKEN!;
const queueId = process.env.ORBIT_QUEUE_ID!;
const tasks = Number(process.env.TASKS);

const print = (o: object) => process.stdout.write(JSON.stringify(o) + "\n");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A keyed call, sent again with its key until it is answered: what a careful user writes. */
async function keyed<T>(call: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await call();
    } catch (e) {
      const retriable = e instanceof OrbitNetworkError || (e instanceof OrbitApiError && e.status >= 500);
      if (!retriable || attempt >= 30) throw e;
      await sleep(200);
    }
  }
}

const client = new OrbitClient({ baseUrl, token });
const { subscription } = await keyed(() =>
  client.createSubscription("results", { name: "results", queue_id: queueId }),
);
print({ subscription: subscription.id });

const submitted = new Set<string>();
const received = new Set<string>();
let finished: () => void;
const allReceived = new Promise<void>((r) => (finished = r));
const check = () => submitted.size === tasks && [...submitted].every((id) => received.has(id)) && finished();

const consumer = new Consumer({
  baseUrl,
  token,
  subscriptionId: subscription.id,
  capacity: 8,
  backoff: { initialMs: 50, maxMs: 500 },
  handler: async (event) => {
    const taskId = event.snapshot.task_id;
    print({ sequence: event.sequence, task_id: taskId, type: event.type });
    received.add(taskId);
    check();
  },
}).start();

const worker = new Worker({
  baseUrl,
  token,
  queueId,
  concurrency: 4,
  waitMs: 1000,
  backoff: { initialMs: 50, maxMs: 500 },
  handler: async (task) => ({ outcome: "succeeded", result: { task: task.id } }),
  onError: () => {}, // a node going away mid-call: the worker backs off and goes on
}).start();

// Paced, so that results are still flowing when the test stops a node.
for (let i = 0; i < tasks; i++) {
  const { task } = await keyed(() => client.submitTask(`task-${i}`, { queue_id: queueId, input: { i } }));
  submitted.add(task.id);
  await sleep(40);
}
check();
await allReceived;
await worker.stop({ deadlineMs: 5000 });
print({ done: true, submitted: submitted.size, received: received.size, consumer: await consumer.stop() });

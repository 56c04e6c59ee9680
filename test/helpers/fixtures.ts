// Shared setup of the delivery tests: a queue and a subscription of a test's own (so
// tests never see each other's results), and task results produced through the API.
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import type { TestDatabase } from "./db.js";
import { bootstrap, type BootstrapOutput } from "./orbit.js";
import type { Client } from "./api.js";

/**
 * A new queue (bootstrap, namespace "ns", application "app") added to `cred`'s scope: a
 * queue of its own per test, so that tests never claim each other's tasks. No API widens
 * a credential; a node that remembers `cred` (a worker's complete and requeue
 * authenticate from memory: credential-lookups.ts) sees the new queue once any other
 * request of `cred` looked it up again — in the tests, the submit or claim before.
 */
export async function grantedQueue(
  db: TestDatabase,
  cred: BootstrapOutput,
  name: string,
  eventAccess = false,
): Promise<string> {
  const out = await bootstrap(db.url, {
    namespace: "ns",
    application: "app",
    queues: [name],
    ...(eventAccess ? { eventAccess } : {}),
  });
  const c = await db.connect();
  try {
    await c.query("INSERT INTO credential_queues (credential_id, queue_id) VALUES (?, ?)", [
      cred.credential_id,
      out.queues[0]!.id,
    ]);
  } finally {
    await c.end();
  }
  return out.queues[0]!.id;
}

/** A new queue in cred's namespace, added to cred's scope, with a subscription on it. */
export async function queueWithSubscription(
  db: TestDatabase,
  cred: BootstrapOutput,
  api: Client,
  extra: Record<string, unknown> = {},
): Promise<{ q: string; sub: string }> {
  const name = `q${randomBytes(3).toString("hex")}`;
  const q = await grantedQueue(db, cred, name, true);
  const res = await api.post("/v1/subscriptions", { name: `s-${name}`, queue_id: q, ...extra });
  assert.equal(res.status, 201, res.text);
  return { q, sub: res.json.data.subscription.id as string };
}

/** n results (task.cancelled) on queue q, in order; returns their task ids. */
export async function cancelledResults(api: Client, q: string, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const t = (await api.post("/v1/tasks", { queue_id: q, input: i })).json.data.task;
    assert.equal((await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" })).status, 200);
    ids.push(t.id);
  }
  return ids;
}

/** n tasks submitted on queue q and claimed, in order: their ids and attempt ids. */
export async function claimedTasks(
  api: Client,
  q: string,
  n: number,
): Promise<{ taskId: string; attemptId: string }[]> {
  const out = [];
  for (let i = 0; i < n; i++) {
    await api.post("/v1/tasks", { queue_id: q, input: { i } });
    const c = (await api.post("/v1/worker/claim", { queue_id: q }, null)).json.data;
    out.push({ taskId: c.task.id as string, attemptId: c.attempt_id as string });
  }
  return out;
}

// Group commit of workers' calls (src/domain/attempt-batches.ts): calls that arrive while
// the node's batch slots are committing go together in one transaction, and each still
// gets the answer it would get alone — 404, 400 and 409 write nothing, a repeat in the
// same batch sees the first call's effect, and a call whose deadline passed commits
// nothing. Batches are held back by row locks taken from the test's own connection.
import { strict as assert } from "node:assert";
import type { Connection } from "mysql2/promise";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, readLog, waitSequenced, type Client } from "../helpers/api.js";
import { request, type RawResponse } from "../helpers/http.js";
import { assertError } from "../helpers/contract.js";
import { claimedTasks, grantedQueue } from "../helpers/fixtures.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("worker calls committed in batches", () => {
  let db: TestDatabase;
  let cred: BootstrapOutput;
  let queueNo = 0;

  before(async () => {
    db = await freshDatabase("attempt_batches");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["base"] });
  });
  after(async () => {
    await db?.drop();
  });

  const freshQueue = () => grantedQueue(db, cred, `b${++queueNo}`);

  /** n tasks submitted and claimed: their ids and attempt ids, in order. */
  async function running(api: Client, n: number): Promise<{ taskId: string; attemptId: string }[]> {
    return claimedTasks(api, await freshQueue(), n);
  }

  /** Locks task rows from the test's own connection: a batch that touches them waits. */
  async function lockTasks(ids: string[]): Promise<Connection> {
    const c = await db.connect();
    // READ COMMITTED: record locks only, no next-key lock on a neighbouring row.
    await c.query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    await c.query("START TRANSACTION");
    // By primary key only: on a table this small a scan would lock every row.
    await c.query("SELECT id FROM tasks FORCE INDEX (PRIMARY) WHERE id IN (?) FOR UPDATE", [ids]);
    return c;
  }

  async function waitFor(what: string, check: () => Promise<boolean>): Promise<void> {
    for (const started = Date.now(); !(await check()); await sleep(20)) {
      if (Date.now() - started > 10000) throw new Error(`timed out waiting for ${what}`);
    }
  }
  /** Batches waiting on a lock in their first statement (INNODB_TRX may not list them yet: the wait can come while planning). */
  const lockWaits = async () => {
    const c = await db.connect();
    try {
      const [rows] = await c.query<any[]>(
        "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE DB = ? AND COMMAND = 'Query' AND INFO LIKE 'SELECT STRAIGHT_JOIN t.id%'",
        [db.name],
      );
      return Number(rows[0].n);
    } finally {
      await c.end();
    }
  };
  const metric = async (node: OrbitNode, re: RegExp) =>
    Number(re.exec((await request(node.url, { path: "/metrics" })).text)?.[1] ?? NaN);
  const waiting = (node: OrbitNode) => metric(node, /^orbit_attempt_calls_waiting (\d+)/m);
  const batches = (node: OrbitNode) => metric(node, /^orbit_attempt_batch_size_count (\d+)/m);

  async function taskRow(taskId: string) {
    const c = await db.connect();
    try {
      const [rows] = await c.query<any[]>(
        "SELECT t.state, t.revision, a.ended_by FROM tasks t LEFT JOIN task_attempts a ON a.task_id = t.id WHERE t.id = ?",
        [taskId],
      );
      return rows[0] as { state: string; revision: string; ended_by: string | null };
    } finally {
      await c.end();
    }
  }

  it("gives every call of a batch its own answer, writes only the successful ones, and numbers their events once", async () => {
    const node = await startNode(db.url);
    try {
      const api = client(node.url, cred.token);
      const stranger = client(
        node.url,
        (await bootstrap(db.url, { namespace: "ns", application: "other", queues: ["x"] })).token,
      );
      const t = await running(api, 9);
      const call = (c: Client, i: number, verb: string, body: unknown) =>
        c.post(`/v1/worker/attempts/${t[i]!.attemptId}:${verb}`, body, null);

      // Both batch slots: one call each, held on a task row lock.
      const lock = await lockTasks([t[0]!.taskId, t[1]!.taskId]);
      const held = [call(api, 0, "complete", { outcome: "succeeded" })];
      await waitFor("the first batch to wait on its lock", async () => (await lockWaits()) === 1);
      held.push(call(api, 1, "complete", { outcome: "succeeded" }));
      await waitFor("the second batch to wait on its lock", async () => (await lockWaits()) === 2);
      const batchesBefore = await batches(node);

      // These wait for a slot, then go together, in this order.
      const inBatch: Promise<RawResponse>[] = [];
      const add = async (p: Promise<RawResponse>) => {
        inBatch.push(p);
        await waitFor("the call to wait for a batch", async () => (await waiting(node)) === inBatch.length);
      };
      await add(call(api, 2, "complete", { outcome: "succeeded", result: { n: 1 } }));
      await add(call(api, 2, "complete", { result: { n: 1 }, outcome: "succeeded" })); // the identical repeat
      await add(call(api, 3, "complete", { outcome: "succeeded" }));
      await add(call(api, 3, "complete", { outcome: "failed" })); // another call on an ended attempt
      await add(call(api, 4, "complete", { outcome: "done" })); // a bad body
      await add(api.post("/v1/worker/attempts/0123456789abcdef0123456789abcdef:complete", { outcome: "failed" }, null));
      await add(call(stranger, 5, "complete", { outcome: "failed" })); // out of the caller's scope
      await add(call(api, 6, "requeue", { reason: "shutting down" }));
      await add(call(api, 7, "complete", { outcome: "needs_review" }));
      await add(call(api, 8, "complete", { outcome: "failed", error: "disk full" }));
      await lock.query("COMMIT");
      await lock.end();

      const [r0, r1] = await Promise.all(held);
      assert.equal(r0!.status, 200, r0!.text);
      assert.equal(r1!.status, 200, r1!.text);
      const [c2, c2again, c3, c3other, c4, unknown, foreign, c6, c7, c8] = await Promise.all(inBatch);
      // The first slot to free takes every waiting call (at most 32 per batch).
      assert.equal((await batches(node)) - batchesBefore, 1, "the 10 waiting calls went in one batch");

      assert.equal(c2!.status, 200, c2!.text);
      assert.equal(c2!.json.data.task.state, "SUCCEEDED");
      assert.equal(c2!.json.data.task.result, `{"n":1}`);
      assert.equal(c2again!.status, 200, c2again!.text);
      assert.deepEqual(c2again!.json.data.task, c2!.json.data.task, "the repeat sees the first call's effect");
      assert.equal(c3!.status, 200, c3!.text);
      assertError(c3other!, 409, "STATE_CONFLICT");
      assertError(c4!, 400, "INVALID_ARGUMENT");
      assertError(unknown!, 404, "NOT_FOUND");
      assertError(foreign!, 404, "NOT_FOUND");
      assert.equal(c6!.json.data.task.state, "QUEUED");
      assert.equal(c7!.json.data.task.state, "NEEDS_REVIEW");
      assert.equal(c8!.json.data.task.state, "FAILED");

      // Nothing of the refused calls was written.
      for (const i of [4, 5])
        assert.deepEqual(await taskRow(t[i]!.taskId), { state: "RUNNING", revision: "2", ended_by: null });
      assert.equal((await taskRow(t[3]!.taskId)).state, "SUCCEEDED");
      await waitSequenced(db, cred.namespace_id);
      const ids = new Set(t.map((x) => x.taskId));
      const events = (await readLog(db, cred.namespace_id)).events.filter((e) => ids.has(e.aggregate_id));
      assert.deepEqual(
        events.map((e) => [t.findIndex((x) => x.taskId === e.aggregate_id), e.type]).sort(),
        [
          [0, "task.succeeded"],
          [1, "task.succeeded"],
          [2, "task.succeeded"],
          [3, "task.succeeded"],
          [6, "task.requeued"],
          [7, "task.needs_review"],
          [8, "task.failed"],
        ],
        "one event per call that moved its task",
      );
      const sequences = events.map((e) => BigInt(e.sequence)).sort((a, b) => (a < b ? -1 : 1));
      assert.equal(
        sequences[sequences.length - 1]! - sequences[0]! + 1n,
        BigInt(sequences.length),
        "numbered without gaps",
      );
    } finally {
      await node.stop();
    }
  });

  it("commits nothing for a call whose deadline passed in its batch; the others commit", async () => {
    const node = await startNode(db.url, { ORBIT_REQUEST_TIMEOUT_MS: "2000" });
    try {
      const api = client(node.url, cred.token);
      const t = await running(api, 4);
      const complete = (i: number) =>
        api.post(`/v1/worker/attempts/${t[i]!.attemptId}:complete`, { outcome: "succeeded" }, null);
      const slots = await lockTasks([t[0]!.taskId, t[1]!.taskId]);
      const late = await lockTasks([t[2]!.taskId]);
      const started = Date.now();
      const a = complete(0);
      await waitFor("the first batch to wait", async () => (await lockWaits()) === 1);
      const b = complete(1);
      await waitFor("the second batch to wait", async () => (await lockWaits()) === 2);
      const x = complete(2); // its deadline: ~2 s from now
      await waitFor("x to wait for a batch", async () => (await waiting(node)) === 1);
      await sleep(1200 - (Date.now() - started));
      const y = complete(3); // its deadline: ~3.2 s
      await waitFor("y to wait for a batch", async () => (await waiting(node)) === 2);
      // The slots free; x and y go together and wait on x's task until x's deadline passed.
      await slots.query("COMMIT");
      await slots.end();
      assert.equal((await a).status, 200);
      assert.equal((await b).status, 200);
      await sleep(2500 - (Date.now() - started));
      await late.query("COMMIT");
      await late.end();

      assertError(await x, 503, "UNAVAILABLE");
      const ry = await y;
      assert.equal(ry.status, 200, ry.text);
      assert.equal(ry.json.data.task.state, "SUCCEEDED");
      await sleep(200); // a commit behind x's back would land now
      assert.deepEqual(
        await taskRow(t[2]!.taskId),
        { state: "RUNNING", revision: "2", ended_by: null },
        "x committed nothing",
      );
      assert.equal((await taskRow(t[3]!.taskId)).state, "SUCCEEDED");
    } finally {
      await node.stop();
    }
  });

  it("commits none of a batch whose node is killed inside it; the workers' retries on another node succeed once", async () => {
    const node = await startNode(db.url);
    const t = await running(client(node.url, cred.token), 5);
    const completeOn = (n: OrbitNode, i: number) =>
      client(n.url, cred.token).post(`/v1/worker/attempts/${t[i]!.attemptId}:complete`, { outcome: "succeeded" }, null);
    const slots = await lockTasks([t[0]!.taskId, t[1]!.taskId]);
    const late = await lockTasks([t[4]!.taskId]);
    try {
      const held = [completeOn(node, 0)];
      await waitFor("the first batch to wait", async () => (await lockWaits()) === 1);
      held.push(completeOn(node, 1));
      await waitFor("the second batch to wait", async () => (await lockWaits()) === 2);
      const lost = [2, 3, 4].map((i) =>
        completeOn(node, i).then(
          (r) => r.status,
          () => "no answer",
        ),
      );
      await waitFor("three calls to wait for a batch", async () => (await waiting(node)) === 3);
      await slots.query("COMMIT");
      for (const r of await Promise.all(held)) assert.equal(r.status, 200, r.text);
      // The batch of the three has begun and waits on the last one's task: kill it there.
      await waitFor("the batch of three to wait", async () => (await lockWaits()) === 1);
      await node.stop("SIGKILL");
      assert.deepEqual(await Promise.all(lost), ["no answer", "no answer", "no answer"]);
    } finally {
      await slots.end();
      await late.query("COMMIT");
      await late.end();
      await node.stop("SIGKILL");
    }
    for (const i of [2, 3, 4])
      assert.deepEqual(
        await taskRow(t[i]!.taskId),
        { state: "RUNNING", revision: "2", ended_by: null },
        `task ${i} unchanged`,
      );

    const again = await startNode(db.url);
    try {
      for (const i of [2, 3, 4]) {
        const res = await completeOn(again, i);
        assert.equal(res.status, 200, res.text);
        assert.equal(res.json.data.task.state, "SUCCEEDED");
      }
    } finally {
      await again.stop();
    }
    await waitSequenced(db, cred.namespace_id);
    const mine = new Set(t.map((x) => x.taskId));
    const events = (await readLog(db, cred.namespace_id)).events.filter((e) => mine.has(e.aggregate_id));
    assert.deepEqual(events.map((e) => e.aggregate_id).sort(), t.map((x) => x.taskId).sort(), "one event per task");
  });

  it("leaves every task either completed with its one event or untouched when its node is killed under load", async () => {
    const node = await startNode(db.url);
    const t = await running(client(node.url, cred.token), 80);
    const api = client(node.url, cred.token);
    // 16 workers completing as fast as they can: batches form; the kill lands somewhere in them.
    let next = 0;
    const workers = Array.from({ length: 16 }, async () => {
      while (next < t.length) {
        const i = next++;
        await api
          .post(`/v1/worker/attempts/${t[i]!.attemptId}:complete`, { outcome: "succeeded" }, null)
          .catch(() => undefined);
      }
    });
    await waitFor("some completions", async () => next >= 30);
    await node.stop("SIGKILL");
    await Promise.all(workers);
    const again = await startNode(db.url);
    try {
      await waitSequenced(db, cred.namespace_id); // what the dead node committed, numbered by this one's sweep
      const c = await db.connect();
      const [rows] = await c.query<any[]>(
        `SELECT t.id, t.state, a.ended_by, (SELECT COUNT(*) FROM result_events e WHERE e.aggregate_id = t.id) AS events
           FROM tasks t JOIN task_attempts a ON a.task_id = t.id WHERE t.id IN (?)`,
        [t.map((x) => x.taskId)],
      );
      await c.end();
      const done = rows.filter((r) => r.state === "SUCCEEDED");
      assert.ok(
        done.length > 0 && done.length < t.length,
        `the kill came mid-run (${done.length} of ${t.length} done)`,
      );
      for (const r of rows) {
        const state =
          r.state === "SUCCEEDED" ? [r.ended_by, Number(r.events)] : [r.state, r.ended_by, Number(r.events)];
        assert.deepEqual(
          state,
          r.state === "SUCCEEDED" ? ["complete", 1] : ["RUNNING", null, 0],
          `task ${r.id}: all of its completion or none`,
        );
      }
      // The workers retry what got no answer: each completes once more at most.
      for (const x of t)
        assert.equal(
          (
            await client(again.url, cred.token).post(
              `/v1/worker/attempts/${x.attemptId}:complete`,
              { outcome: "succeeded" },
              null,
            )
          ).status,
          200,
        );
      await waitSequenced(db, cred.namespace_id);
      const events = (await readLog(db, cred.namespace_id)).events.filter((e) =>
        t.some((x) => x.taskId === e.aggregate_id),
      );
      assert.equal(events.length, t.length, "one event per task");
    } finally {
      await again.stop();
    }
  });
});

// The batch worker calls over real HTTP (docs/tasks.md §6): claimTasks takes up to
// max_tasks tasks of a queue in one request, with claimTask's long-poll and refusals;
// completeAttempts ends several attempts in one request, each item answered as
// completeAttempt would answer it, only the accepted ones written, together.
import { strict as assert } from "node:assert";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, runCli, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, makeCredential, readLog, waitSequenced, type Client } from "../helpers/api.js";
import { request, type RawResponse } from "../helpers/http.js";
import { assertContract, assertError } from "../helpers/contract.js";
import { claimedTasks, grantedQueue } from "../helpers/fixtures.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const NO_ID = "0123456789abcdef0123456789abcdef";

describe("worker batch calls", function () {
  this.timeout(30000);
  let db: TestDatabase;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  let api: Client;
  let queueNo = 0;

  const freshQueue = () => grantedQueue(db, cred, `wb${++queueNo}`);
  const submit = async (queueId: string, extra: Record<string, unknown> = {}) => {
    const res = await api.post("/v1/tasks", { queue_id: queueId, input: { job: 1 }, ...extra });
    assert.equal(res.status, 201, res.text);
    return res.json.data.task as { id: string };
  };
  const claims = (body: unknown, c: Client = api) => c.post("/v1/worker/claims", body, null);
  const completions = (body: unknown, c: Client = api) => c.post("/v1/worker/completions", body, null);
  const complete = (attemptId: string, body: unknown) =>
    api.post(`/v1/worker/attempts/${attemptId}:complete`, body, null);
  const taskOf = async (id: string) => (await api.get(`/v1/tasks/${id}`)).json.data;
  const attemptCount = async () => Number((await db.query("SELECT COUNT(*) AS n FROM task_attempts"))[0].n);
  /** The namespace's whole log, once numbered: one database per file, so every event is this file's. */
  async function log() {
    await waitSequenced(db, cred.namespace_id);
    const { head, events } = await readLog(db, cred.namespace_id);
    assert.deepEqual(
      events.map((e) => e.sequence),
      Array.from({ length: Number(head) }, (_, i) => String(i + 1)),
      "the log is numbered 1..head without gaps",
    );
    return events;
  }
  const metric = async (re: RegExp) =>
    Number(re.exec((await request(node.url, { path: "/metrics" })).text)?.[1] ?? NaN);

  before(async () => {
    db = await freshDatabase("worker_batches");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["base"] });
    // The default 60 s lease: no attempt of a test runs out while it runs.
    node = await startNode(db.url);
    api = client(node.url, cred.token);
  });
  after(async () => {
    await node?.stop();
    await db?.drop();
  });

  describe("claimTasks", () => {
    it("claims max_tasks distinct tasks, oldest first, each RUNNING under its own attempt", async () => {
      const q = await freshQueue();
      const submitted = [];
      for (let i = 0; i < 5; i++) submitted.push((await submit(q)).id);
      const res = await claims({ queue_id: q, max_tasks: 3 });
      assert.equal(res.status, 200, res.text);
      assertContract("claimTasks", res);
      const got = res.json.data.claims as { task: any; attempt_id: string; lease_until: string }[];
      assert.deepEqual(
        got.map((c) => c.task.id),
        submitted.slice(0, 3),
      );
      assert.equal(new Set(got.map((c) => c.attempt_id)).size, 3, "an attempt of its own each");
      for (const c of got) {
        assert.deepEqual([c.task.state, c.task.attempts, c.task.revision], ["RUNNING", 1, "2"]);
        assert.equal(Date.parse(c.lease_until) - Date.parse(c.task.updated_at), 60000, "the worker lease");
        const row = (await db.query("SELECT current_attempt_id, state FROM tasks WHERE id = ?", [c.task.id]))[0];
        assert.deepEqual([row.state, row.current_attempt_id], ["RUNNING", c.attempt_id]);
      }
      // Each claimed attempt completes as one claimTask's would.
      const done = await complete(got[0]!.attempt_id, { outcome: "succeeded" });
      assert.equal(done.status, 200, done.text);
    });

    it("claims fewer when fewer are queued, then answers 204 at once with wait_ms 0", async () => {
      const q = await freshQueue();
      const a = await submit(q);
      const b = await submit(q);
      const res = await claims({ queue_id: q, max_tasks: 32 });
      assert.equal(res.status, 200, res.text);
      assert.deepEqual(
        res.json.data.claims.map((c: any) => c.task.id),
        [a.id, b.id],
      );
      const none = await claims({ queue_id: q, max_tasks: 32, wait_ms: 0 });
      assert.equal(none.status, 204);
      assertContract("claimTasks", none);
    });

    it("lets concurrent batch claims of one queue pass each other: every task taken once", async () => {
      const q = await freshQueue();
      const submitted = new Set<string>();
      for (let i = 0; i < 10; i++) submitted.add((await submit(q)).id);
      const answers = await Promise.all([1, 2, 3, 4].map(() => claims({ queue_id: q, max_tasks: 4, wait_ms: 2000 })));
      const taken = answers.flatMap((r) => (r.status === 200 ? r.json.data.claims.map((c: any) => c.task.id) : []));
      assert.equal(new Set(taken).size, taken.length, "no task claimed twice");
      assert.deepEqual(new Set(taken), submitted, "all ten taken");
      for (const r of answers) assert.ok(r.status === 204 || r.json.data.claims.length <= 4, r.text);
    });

    it("answers 204 once wait_ms has passed with no task", async () => {
      const q = await freshQueue();
      const started = performance.now();
      const res = await claims({ queue_id: q, max_tasks: 4, wait_ms: 1200 });
      const elapsed = performance.now() - started;
      assert.equal(res.status, 204, res.text);
      assert.ok(elapsed >= 1100 && elapsed < 5000, `answered at the end of its wait (${elapsed} ms)`);
    });

    it("long-polls: wakes when a task is submitted and answers with what it finds", async () => {
      const q = await freshQueue();
      const started = Date.now();
      const waiting = claims({ queue_id: q, max_tasks: 8, wait_ms: 15000 });
      await sleep(300);
      const t = await submit(q);
      const res = await waiting;
      assert.equal(res.status, 200, res.text);
      assert.deepEqual(
        res.json.data.claims.map((c: any) => c.task.id),
        [t.id],
      );
      assert.ok(Date.now() - started < 5000, "woken by the submit, not by the deadline");
    });

    it("refuses bad input, another's queue, a credential without tasks:work and no token, writing nothing", async () => {
      const q = await freshQueue();
      const t = await submit(q);
      const before = await attemptCount();
      for (const body of [
        { queue_id: q, max_tasks: 0 },
        { queue_id: q, max_tasks: 33 },
        { queue_id: q, max_tasks: "2" },
        { queue_id: q, max_tasks: 1.5 },
        { queue_id: q },
        { queue_id: q, max_tasks: 2, wait_ms: 20001 },
        { queue_id: q, max_tasks: 2, extra: true },
        { queue_id: q.toUpperCase(), max_tasks: 2 },
      ])
        assertError(await claims(body), 400, "INVALID_ARGUMENT");
      assertError(await claims("[]"), 400, "INVALID_ARGUMENT");
      // 404 before 400: a well-formed queue outside the scope, whatever else is wrong.
      assertError(await claims({ queue_id: NO_ID, max_tasks: 2 }), 404, "NOT_FOUND");
      assertError(await claims({ queue_id: NO_ID, max_tasks: 0 }), 404, "NOT_FOUND");
      const submitter = await makeCredential(db, {
        namespaceId: cred.namespace_id,
        applicationId: cred.application_id,
        actions: ["tasks:submit", "tasks:read"],
        queueIds: [q],
      });
      assertError(
        await claims({ queue_id: q, max_tasks: 2 }, client(node.url, submitter.token)),
        403,
        "PERMISSION_DENIED",
      );
      const anonymous = await request(node.url, {
        method: "POST",
        path: "/v1/worker/claims",
        body: JSON.stringify({ queue_id: q, max_tasks: 2 }),
      });
      assertError(anonymous, 401, "UNAUTHENTICATED");
      const now = await taskOf(t.id);
      assert.deepEqual([now.state, now.attempts, now.revision], ["QUEUED", 0, "1"], "the task is untouched");
      assert.equal(await attemptCount(), before, "no attempt was created");
    });

    it("takes no task for a credential revoked while it waits: 401", async () => {
      const q = await freshQueue();
      const worker = await makeCredential(db, {
        namespaceId: cred.namespace_id,
        applicationId: cred.application_id,
        actions: ["tasks:work"],
        queueIds: [q],
      });
      const waiting = claims({ queue_id: q, max_tasks: 4, wait_ms: 10000 }, client(node.url, worker.token));
      await sleep(300);
      const rv = await runCli(["revoke", "--credential", worker.id], { ORBIT_DATABASE_URL: db.url });
      assert.equal(rv.code, 0, rv.stderr);
      const t = await submit(q);
      assertError(await waiting, 401, "UNAUTHENTICATED");
      assert.equal((await taskOf(t.id)).state, "QUEUED");
    });
  });

  describe("completeAttempts", () => {
    it("answers each item in order as completeAttempt would, and writes exactly the accepted ones, in one transaction", async () => {
      const q = await freshQueue();
      const [fresh, stale, repeated, badBody] = await claimedTasks(api, q, 4);
      const stranger = await bootstrap(db.url, { namespace: "ns", application: "other", queues: ["elsewhere"] });
      // Ended earlier, alone: `stale` by a failure, `repeated` by the call repeated below.
      assert.equal((await complete(stale!.attemptId, { outcome: "failed" })).status, 200);
      const first = await complete(repeated!.attemptId, `{"outcome":"succeeded","result":{"n":1}}`);
      assert.equal(first.status, 200, first.text);
      const eventsBefore = (await log()).length;
      const batchesBefore = await metric(/^orbit_attempt_batch_size_count (\d+)/m);
      const callsBefore = await metric(/^orbit_attempt_batch_size_sum (\d+)/m);

      const body = `{"items":[
        {"attempt_id":"${fresh!.attemptId}","outcome":"succeeded","result":{"big":12345678901234567890, "f":1.10}},
        {"attempt_id":"${NO_ID}","outcome":"succeeded"},
        {"attempt_id":"${stale!.attemptId}","outcome":"succeeded"},
        {"result" : {"n":1},"attempt_id":"${repeated!.attemptId}","outcome":"succeeded"},
        {"attempt_id":"${badBody!.attemptId}","outcome":"done"}
      ]}`;
      const res = await completions(body);
      assert.equal(res.status, 200, res.text);
      assertContract("completeAttempts", res);
      const items = res.json.data.items as any[];
      assert.deepEqual(
        items.map((i) => [i.attempt_id, i.status, i.error?.code ?? i.task.state]),
        [
          [fresh!.attemptId, 200, "SUCCEEDED"],
          [NO_ID, 404, "NOT_FOUND"],
          [stale!.attemptId, 409, "STATE_CONFLICT"],
          [repeated!.attemptId, 200, "SUCCEEDED"],
          [badBody!.attemptId, 400, "INVALID_ARGUMENT"],
        ],
      );
      assert.equal(items[0].task.result, `{"big":12345678901234567890, "f":1.10}`, "the result as sent");
      assert.deepEqual(items[3].task, first.json.data.task, "the identical repeat: the current task, unchanged");
      assert.equal((await metric(/^orbit_attempt_batch_size_count (\d+)/m)) - batchesBefore, 1, "one transaction");
      assert.equal((await metric(/^orbit_attempt_batch_size_sum (\d+)/m)) - callsBefore, 5, "of the five items");

      assert.equal((await taskOf(fresh!.taskId)).state, "SUCCEEDED");
      assert.equal((await taskOf(stale!.taskId)).state, "FAILED", "the stale item wrote nothing");
      const bad = await taskOf(badBody!.taskId);
      assert.deepEqual([bad.state, bad.revision], ["RUNNING", "2"], "the refused item wrote nothing");
      const events = await log();
      assert.deepEqual(
        events.slice(eventsBefore).map((e) => [e.aggregate_id, e.type, e.snapshot.current_attempt_id]),
        [[fresh!.taskId, "task.succeeded", fresh!.attemptId]],
        "one event, for the one item that moved its task",
      );
      assert.equal(events[events.length - 1]!.snapshot.result, `{"big":12345678901234567890, "f":1.10}`);

      // The same request again: the accepted items are identical repeats now; nothing is written.
      const again = await completions(body);
      assert.deepEqual(
        again.json.data.items.map((i: any) => i.status),
        [200, 404, 409, 200, 400],
      );
      assert.deepEqual(again.json.data.items[0].task, items[0].task);
      // And completeAttempt takes the same repeat of an item alone.
      const alone = await complete(
        fresh!.attemptId,
        `{"result":{"big":12345678901234567890, "f":1.10},"outcome":"succeeded"}`,
      );
      assert.equal(alone.status, 200, alone.text);
      assert.equal((await log()).length, eventsBefore + 1, "no event for the repeats");
      // An attempt outside the caller's scope is not found, item by item.
      const foreign = await completions(
        { items: [{ attempt_id: badBody!.attemptId, outcome: "succeeded" }] },
        client(node.url, stranger.token),
      );
      assert.equal(foreign.status, 200, foreign.text);
      assert.deepEqual([foreign.json.data.items[0].status, foreign.json.data.items[0].error.code], [404, "NOT_FOUND"]);
      assert.equal((await taskOf(badBody!.taskId)).state, "RUNNING");
    });

    it("holds each item's result to completeAttempt's limit, and the answers the others", async () => {
      const q = await freshQueue();
      const [big, small] = await claimedTasks(api, q, 2);
      // 256 KiB - 5 characters as sent: one byte over the limit as the JSON string task.result carries.
      const over = `"${"x".repeat(256 * 1024 - 5)}"`;
      const res = await completions(
        `{"items":[{"attempt_id":"${big!.attemptId}","outcome":"succeeded","result":${over}},` +
          `{"attempt_id":"${small!.attemptId}","outcome":"needs_review","result":[1]}]}`,
      );
      assert.equal(res.status, 200, res.text.slice(0, 300));
      assertContract("completeAttempts", res);
      assert.deepEqual(
        res.json.data.items.map((i: any) => [i.status, i.error?.code ?? i.task.state]),
        [
          [400, "INVALID_ARGUMENT"],
          [200, "NEEDS_REVIEW"],
        ],
      );
      assert.equal((await taskOf(big!.taskId)).state, "RUNNING");
    });

    it("refuses the whole request when it cannot be read as a list of attempts, writing nothing", async () => {
      const q = await freshQueue();
      const running = await claimedTasks(api, q, 2);
      const eventsBefore = (await log()).length;
      const item = (i: number, extra: Record<string, unknown> = {}) => ({
        attempt_id: running[i]!.attemptId,
        outcome: "succeeded",
        ...extra,
      });
      const thirtyThree = Array.from({ length: 33 }, (_, i) => ({
        attempt_id: i === 0 ? running[0]!.attemptId : i.toString(16).padStart(32, "0"),
        outcome: "succeeded",
      }));
      for (const body of [
        { items: [] },
        { items: thirtyThree },
        { items: [item(0), item(1), item(0, { outcome: "failed" })] },
        { items: [item(0), item(1)], extra: 1 },
        { items: [item(0), item(1, { outcome: "done" })], extra: 1 },
        {},
        { items: item(0) },
        { items: [item(0), "x"] },
        { items: [item(0), { outcome: "succeeded" }] },
        { items: [item(0), { attempt_id: running[1]!.attemptId.toUpperCase(), outcome: "succeeded" }] },
        [item(0)],
      ])
        assertError(await completions(body), 400, "INVALID_ARGUMENT");
      for (const r of running) assert.equal((await taskOf(r.taskId)).state, "RUNNING", "nothing written");
      assert.equal((await log()).length, eventsBefore);
    });

    it("answers 401 and 403 for the whole request", async () => {
      const q = await freshQueue();
      const [r] = await claimedTasks(api, q, 1);
      const body = { items: [{ attempt_id: r!.attemptId, outcome: "succeeded" }] };
      const reader = await makeCredential(db, {
        namespaceId: cred.namespace_id,
        applicationId: cred.application_id,
        actions: ["tasks:read"],
        queueIds: [q],
      });
      assertError(await completions(body, client(node.url, reader.token)), 403, "PERMISSION_DENIED");
      const anonymous = await request(node.url, {
        method: "POST",
        path: "/v1/worker/completions",
        body: JSON.stringify(body),
      });
      assertError(anonymous, 401, "UNAUTHENTICATED");
      // A credential the node has seen, then revoked: 401 before its items' answers.
      const worker = await makeCredential(db, {
        namespaceId: cred.namespace_id,
        applicationId: cred.application_id,
        actions: ["tasks:work"],
        queueIds: [q],
      });
      const w = client(node.url, worker.token);
      assert.equal((await w.get("/v1/credential")).status, 200);
      const rv = await runCli(["revoke", "--credential", worker.id], { ORBIT_DATABASE_URL: db.url });
      assert.equal(rv.code, 0, rv.stderr);
      assertError(await completions(body, w), 401, "UNAUTHENTICATED");
      assertError(await completions({ items: [] }, w), 401, "UNAUTHENTICATED");
      assert.equal((await taskOf(r!.taskId)).state, "RUNNING");
      const done = (await completions(body)) as RawResponse;
      assert.equal(done.json.data.items[0].task.state, "SUCCEEDED");
    });
  });
});

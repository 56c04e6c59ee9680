// The worker API over real HTTP (docs/tasks.md): claim with long-poll, complete, requeue,
// stale and repeated completions, and attempt leases that run out.
import { strict as assert } from "node:assert";
import http from "node:http";
import { freshDatabase, MYSQL_PORT, type TestDatabase } from "../helpers/db.js";
import { bootstrap, runCli, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { startProxy, type Proxy } from "../helpers/proxy.js";
import { client, makeCredential, readLog, waitSequenced, type Client } from "../helpers/api.js";
import { assertContract, assertError } from "../helpers/contract.js";
import { grantedQueue } from "../helpers/fixtures.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("worker API", () => {
  let db: TestDatabase;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  let api: Client;
  let queueNo = 0;

  const freshQueue = () => grantedQueue(db, cred, `w${++queueNo}`);
  const submit = async (queueId: string, extra: Record<string, unknown> = {}) =>
    (await api.post("/v1/tasks", { queue_id: queueId, input: { job: 1 }, ...extra })).json.data.task;
  const claim = (queueId: string, waitMs?: number) =>
    api.post("/v1/worker/claim", { queue_id: queueId, ...(waitMs !== undefined ? { wait_ms: waitMs } : {}) }, null);
  const complete = (attempt: string, body: unknown) => api.post(`/v1/worker/attempts/${attempt}:complete`, body, null);
  const requeue = (attempt: string, body: unknown) => api.post(`/v1/worker/attempts/${attempt}:requeue`, body, null);

  before(async () => {
    db = await freshDatabase("worker");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["base"] });
    // 1 s: short for the expiry tests, and long enough for the tests that complete after
    // a few calls (a call on an attempt past its lease is 409 at once, sweep or not).
    node = await startNode(db.url, { ORBIT_WORKER_LEASE_MS: "1000" });
    api = client(node.url, cred.token);
  });
  after(async () => {
    await node?.stop();
    await db?.drop();
  });

  it("answers 204 at once when the queue is empty and wait_ms is 0", async () => {
    const q = await freshQueue();
    // docs/tasks.md: wait_ms defaults to 0 (answer at once): omitted here, it waits for
    // nothing (the bound is loose; a default of 2 s or more, of up to 20 s, is beyond it).
    const started = performance.now();
    const res = await claim(q);
    assert.equal(res.status, 204);
    assert.ok(performance.now() - started < 2000, "an omitted wait_ms waits for nothing");
    assertContract("claimTask", res);
  });

  it("claims the oldest QUEUED task: RUNNING, attempts 1, a lease", async () => {
    const q = await freshQueue();
    const first = await submit(q);
    await submit(q);
    const res = await claim(q);
    assert.equal(res.status, 200, res.text);
    assertContract("claimTask", res);
    const d = res.json.data;
    assert.equal(d.task.id, first.id);
    assert.equal(d.task.state, "RUNNING");
    assert.equal(d.task.attempts, 1);
    assert.equal(d.task.revision, "2");
    assert.match(d.attempt_id, /^[0-9a-f]{32}$/);
    const lease = Date.parse(d.lease_until) - Date.parse(d.task.updated_at);
    assert.equal(lease, 1000, "the lease is ORBIT_WORKER_LEASE_MS");
  });

  it("keeps the result as the exact JSON text, in the task and in the event", async () => {
    const q = await freshQueue();
    const t = await submit(q);
    const c = (await claim(q)).json.data;
    const body = `{"outcome":"succeeded","result":{"n":12345678901234567890,"f":1.10,"s":"\\u00e9"}}`;
    const res = await complete(c.attempt_id, body);
    assert.equal(res.status, 200, res.text);
    assertContract("completeAttempt", res);
    const exact = `{"n":12345678901234567890,"f":1.10,"s":"\\u00e9"}`;
    assert.equal(res.json.data.task.result, exact);
    assert.equal(res.json.data.task.state, "SUCCEEDED");
    assert.equal((await api.get(`/v1/tasks/${t.id}`)).json.data.result, exact);
    await waitSequenced(db, cred.namespace_id);
    const e = (await readLog(db, cred.namespace_id)).events.find((x) => x.aggregate_id === t.id)!;
    assert.equal(e.type, "task.succeeded");
    assert.equal(e.snapshot.result, exact);
    assert.equal(e.snapshot.current_attempt_id, c.attempt_id);
    assert.deepEqual(e.details, { state: "SUCCEEDED", reason: "WORKER_SUCCEEDED" });
    assert.ok(!JSON.stringify(e).includes("job"), "task input never appears in events");
  });

  it("refuses a result above 256 KiB as the JSON string events carry it in, so every event.deliver frame fits 512 KiB", async () => {
    // 60,000 `""` items: 180 KB as sent, 300 KB escaped; accepted, its event.deliver frame
    // would be ~600 KB, above the contract's frame limit (a client holding it closes with 1009).
    const quotes = `[${Array(60_000).fill('""').join(",")}]`;
    const q = await freshQueue();
    const t = await submit(q);
    const c = (await claim(q)).json.data;
    assertError(await complete(c.attempt_id, `{"outcome":"succeeded","result":${quotes}}`), 400, "INVALID_ARGUMENT");
    assert.equal((await api.get(`/v1/tasks/${t.id}`)).json.data.state, "RUNNING", "nothing written");
    // At the limit: "x…x" as sent is N + 2 bytes, N + 6 as a JSON string.
    const atLimit = (n: number) => `"${"x".repeat(n)}"`;
    assertError(
      await complete(c.attempt_id, `{"outcome":"needs_review","result":${atLimit(256 * 1024 - 5)}}`),
      400,
      "INVALID_ARGUMENT",
    );
    const res = await complete(c.attempt_id, `{"outcome":"needs_review","result":${atLimit(256 * 1024 - 6)}}`);
    assert.equal(res.status, 200, res.text.slice(0, 300));
    // A reviewer's result is held to the same limit.
    const resolve = (result: string) =>
      api.post(
        `/v1/tasks/${t.id}:resolve`,
        `{"expected_revision":"3","outcome":"succeeded","result":${result},"reason":"checked"}`,
      );
    assertError(await resolve(quotes), 400, "INVALID_ARGUMENT");
    assert.equal((await resolve("[1]")).status, 200);
  });

  it("answers a repeated identical completion with 200 and writes nothing; anything else is 409", async () => {
    const q = await freshQueue();
    const t = await submit(q);
    const c = (await claim(q)).json.data;
    const body = { outcome: "failed", error: "disk full" };
    const first = await complete(c.attempt_id, body);
    assert.equal(first.status, 200);
    assert.equal(first.json.data.task.state, "FAILED");
    await waitSequenced(db, cred.namespace_id);
    // Only this task's events: other tests' expired attempts add events of their own.
    const mine = async () =>
      (await readLog(db, cred.namespace_id)).events.filter((e) => e.aggregate_id === t.id).length;
    const before = await mine();
    const again = await complete(c.attempt_id, { error: "disk full", outcome: "failed" });
    assert.equal(again.status, 200, again.text);
    assert.deepEqual(again.json.data.task, first.json.data.task, "the current task, unchanged");
    assertError(await complete(c.attempt_id, { outcome: "succeeded" }), 409, "STATE_CONFLICT");
    assertError(await requeue(c.attempt_id, { reason: "x" }), 409, "STATE_CONFLICT");
    await waitSequenced(db, cred.namespace_id);
    assert.equal(await mine(), before, "no event written");
    assert.equal((await api.get(`/v1/tasks/${t.id}`)).json.data.revision, first.json.data.task.revision);
  });

  it("requeues a safe retry to the back of the queue (task.requeued), and fails it at its attempt limit", async () => {
    const q = await freshQueue();
    const t = await submit(q, { max_attempts: 2 });
    const a1 = (await claim(q)).json.data;
    const r1 = await requeue(a1.attempt_id, { reason: "worker shutting down" });
    assert.equal(r1.status, 200, r1.text);
    assertContract("requeueAttempt", r1);
    assert.equal(r1.json.data.task.state, "QUEUED");
    assert.equal((await requeue(a1.attempt_id, { reason: "worker shutting down" })).status, 200, "identical repeat");
    const a2 = (await claim(q)).json.data;
    assert.equal(a2.task.attempts, 2);
    const r2 = await requeue(a2.attempt_id, { reason: "again" });
    assert.equal(r2.json.data.task.state, "FAILED", "no attempts left");
    assertError(await requeue(a2.attempt_id, { reason: "" }), 400, "INVALID_ARGUMENT");
    await waitSequenced(db, cred.namespace_id);
    const events = (await readLog(db, cred.namespace_id)).events.filter((e) => e.aggregate_id === t.id);
    assert.deepEqual(
      events.map((e) => [e.type, e.details.reason, e.snapshot.effect_uncertain]),
      [
        ["task.requeued", "WORKER_REQUEUED", false],
        ["task.failed", "ATTEMPTS_EXHAUSTED", false],
      ],
    );
  });

  it("recovers an attempt whose lease ran out: requeued, then FAILED with effect_uncertain at the limit", async () => {
    const q = await freshQueue();
    const t = await submit(q, { max_attempts: 2 });
    const a1 = (await claim(q)).json.data;
    await sleep(2200); // lease 1 s; the sweep runs every second
    const mid = (await api.get(`/v1/tasks/${t.id}`)).json.data;
    assert.equal(mid.state, "QUEUED");
    assertError(await complete(a1.attempt_id, { outcome: "succeeded" }), 409, "STATE_CONFLICT");
    const a2 = (await claim(q)).json.data;
    assert.equal(a2.task.id, t.id);
    await sleep(1100);
    // A claim recovers expired attempts of its queue first, without waiting for the sweep.
    assert.equal((await claim(q)).status, 204);
    const end = (await api.get(`/v1/tasks/${t.id}`)).json.data;
    assert.equal(end.state, "FAILED");
    await waitSequenced(db, cred.namespace_id);
    const events = (await readLog(db, cred.namespace_id)).events.filter((e) => e.aggregate_id === t.id);
    assert.deepEqual(
      events.map((e) => [e.type, e.details.reason, e.snapshot.effect_uncertain, e.snapshot.current_attempt_id]),
      [
        ["task.requeued", "LEASE_EXPIRED", true, a1.attempt_id],
        ["task.failed", "ATTEMPTS_EXHAUSTED", true, a2.attempt_id],
      ],
    );
  });

  it("long-polls: a claim waits and receives a task submitted during the wait", async () => {
    const q = await freshQueue();
    const started = Date.now();
    const waiting = claim(q, 10000);
    await sleep(300);
    const t = await submit(q);
    const res = await waiting;
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.data.task.id, t.id);
    assert.ok(Date.now() - started < 5000, "woken by the submit, not by the deadline");
  });

  it("takes no task for a credential revoked while its claim waits: 401, and the task stays QUEUED", async () => {
    // Were a long-poll authenticated only once, at its start, a worker revoked during its
    // wait_ms would still take the next task (RUNNING under an attempt of a revoked credential).
    const q = await freshQueue();
    const worker = await makeCredential(db, {
      namespaceId: cred.namespace_id,
      applicationId: cred.application_id,
      actions: ["tasks:work"],
      queueIds: [q],
    });
    const waiting = client(node.url, worker.token).post("/v1/worker/claim", { queue_id: q, wait_ms: 10000 }, null);
    await sleep(300);
    const rv = await runCli(["revoke", "--credential", worker.id], { ORBIT_DATABASE_URL: db.url });
    assert.equal(rv.code, 0, rv.stderr);
    const t = await submit(q);
    const res = await waiting;
    assertError(res, 401, "UNAUTHENTICATED");
    const now = await api.get(`/v1/tasks/${t.id}`);
    assert.equal(now.json.data.state, "QUEUED");
    assert.equal(now.json.data.attempts, 0);
  });

  it("takes no task for a long-poll whose client went away: the task stays QUEUED for the next worker", async () => {
    // A worker that stops waiting (its HTTP timeout, a restart) must not leave its claim
    // polling for the rest of wait_ms: the next task would be RUNNING under an attempt
    // nobody holds until its lease runs out (60 s by default), then come back with an
    // attempt used and effect_uncertain=true — or FAILED, ATTEMPTS_EXHAUSTED, at max_attempts 1.
    const q = await freshQueue();
    const u = new URL(node.url);
    const gone = http.request({
      host: u.hostname,
      port: u.port,
      method: "POST",
      path: "/v1/worker/claim",
      agent: false,
      headers: {
        Authorization: `Bearer ${cred.token}`,
        "Content-Type": "application/json",
      },
    });
    gone.on("error", () => undefined);
    gone.end(JSON.stringify({ queue_id: q, wait_ms: 10000 }));
    await sleep(300);
    gone.destroy();
    await sleep(300);
    const t = await submit(q, { max_attempts: 1 });
    await sleep(500);
    const now = (await api.get(`/v1/tasks/${t.id}`)).json.data;
    assert.deepEqual([now.state, now.attempts, now.revision], ["QUEUED", 0, "1"], "no claim for a client that left");
    const c = await claim(q);
    assert.equal(c.status, 200, c.text);
    assert.equal(c.json.data.task.id, t.id);
    assert.equal(c.json.data.task.attempts, 1);
  });

  it("waits idle without busy-looping the database, then answers 204", async () => {
    const q = await freshQueue();
    // A node of its own behind a counting proxy: only its statements are counted, whatever
    // else uses the database server meanwhile.
    const proxy = await startProxy(MYSQL_PORT);
    const own = await startNode(db.urlVia(proxy));
    try {
      await sleep(1500); // start-up statements (migrations check, first sweeps) are over
      const before = proxy.chunksFromClients;
      const started = Date.now();
      const res = await client(own.url, cred.token).post("/v1/worker/claim", { queue_id: q, wait_ms: 3000 }, null);
      const elapsed = Date.now() - started;
      const used = proxy.chunksFromClients - before;
      assert.equal(res.status, 204);
      assert.ok(elapsed >= 2900 && elapsed < 6000, `answered at the deadline (${elapsed} ms)`);
      // Bound: one claim transaction per poll second (SET isolation, START, two SELECTs,
      // COMMIT: 5 statements), authentication, and the node's background jobs (attempt
      // expiry 1/s, sequencer sweep, retention): a few dozen in 3 s; we allow 75 (25/s).
      // A busy loop would issue thousands.
      assert.ok(used < 75, `${used} statements in ${elapsed} ms`);
      assert.ok(used > 3, `the claim polled the database (${used} statements)`);
    } finally {
      await own.stop();
      await proxy.close();
    }
  });

  it("validates claims and completions, and keeps other credentials' attempts out of reach", async () => {
    const q = await freshQueue();
    assertError(await api.post("/v1/worker/claim", { queue_id: q, wait_ms: 20001 }, null), 400, "INVALID_ARGUMENT");
    assertError(await api.post("/v1/worker/claim", { queue_id: q, wait_ms: -1 }, null), 400, "INVALID_ARGUMENT");
    // The upper limit itself is accepted (docs/tasks.md: wait_ms ≤ 20000); a QUEUED task answers at once.
    const waited = await submit(q);
    const atLimit = await claim(q, 20000);
    assert.equal(atLimit.status, 200, atLimit.text);
    assert.equal(atLimit.json.data.task.id, waited.id);
    assert.equal((await complete(atLimit.json.data.attempt_id, { outcome: "succeeded" })).status, 200);
    assertError(
      await api.post("/v1/worker/claim", { queue_id: "0123456789abcdef0123456789abcdef" }, null),
      404,
      "NOT_FOUND",
    );
    await submit(q);
    const a = (await claim(q)).json.data;
    assertError(await complete(a.attempt_id, { outcome: "done" }), 400, "INVALID_ARGUMENT");
    assertError(await complete(a.attempt_id, { outcome: "failed", error: "" }), 400, "INVALID_ARGUMENT");
    assertError(await complete("0123456789abcdef0123456789abcdef", { outcome: "failed" }), 404, "NOT_FOUND");
    const stranger = await bootstrap(db.url, { namespace: "ns", application: "other", queues: ["elsewhere"] });
    assertError(
      await client(node.url, stranger.token).post(
        `/v1/worker/attempts/${a.attempt_id}:complete`,
        { outcome: "failed" },
        null,
      ),
      404,
      "NOT_FOUND",
    );
    // 404 before 400: the body is read first, but its error waits for the scope check.
    assertError(await complete("0123456789abcdef0123456789abcdef", { outcome: "done" }), 404, "NOT_FOUND");
    assertError(await requeue("0123456789abcdef0123456789abcdef", { reason: "" }), 404, "NOT_FOUND");
    assertError(
      await client(node.url, stranger.token).post(
        `/v1/worker/attempts/${a.attempt_id}:complete`,
        { outcome: "done" },
        null,
      ),
      404,
      "NOT_FOUND",
    );
    assertError(await requeue(a.attempt_id, { reason: "" }), 400, "INVALID_ARGUMENT");
    const submitter = await makeCredential(db, {
      namespaceId: cred.namespace_id,
      applicationId: cred.application_id,
      actions: ["tasks:submit"],
      queueIds: [q],
    });
    assertError(
      await client(node.url, submitter.token).post("/v1/worker/claim", { queue_id: q }, null),
      403,
      "PERMISSION_DENIED",
    );
    // Worker calls ignore an Idempotency-Key. (A fresh attempt: the 1 s lease of `a`
    // may have run out during the checks above.)
    await submit(q);
    const fresh = (await claim(q)).json.data;
    const withKey = await api.post(
      `/v1/worker/attempts/${fresh.attempt_id}:complete`,
      { outcome: "succeeded" },
      "ignored-key",
    );
    assert.equal(withKey.status, 200, withKey.text);
  });

  describe("calls of a credential revoked after the node has seen it", function () {
    // A worker's complete and requeue authenticate from what the node remembers of the
    // credential, and their own transaction checks the revocation (http/caller.ts
    // REVOCATION_IN_TRANSACTION, worker.ts endAttemptCalls). Every call here comes from a
    // credential the node has already found active, then revoked by `orbit revoke`: each
    // is 401 before anything else (the order of checks), and nothing of it is written. A node of
    // its own with the default 60 s attempt lease: no attempt runs out during a test.
    let node: OrbitNode;
    let api: Client;

    before(async () => {
      node = await startNode(db.url);
      api = client(node.url, cred.token);
    });
    after(async () => {
      await node?.stop();
    });

    /** A queue and a credential of `actions` on it, which the node has found active (its first call). */
    async function rememberedCredential(actions: string[]) {
      const q = await freshQueue();
      const c = await makeCredential(db, {
        namespaceId: cred.namespace_id,
        applicationId: cred.application_id,
        actions,
        queueIds: [q],
      });
      return { q, id: c.id, api: client(node.url, c.token) };
    }
    const revoke = async (id: string) => {
      const rv = await runCli(["revoke", "--credential", id], { ORBIT_DATABASE_URL: db.url });
      assert.equal(rv.code, 0, rv.stderr);
    };
    const taskOf = async (id: string) => (await api.get(`/v1/tasks/${id}`)).json.data;
    /** The node's statements waiting for a row lock of this database. */
    const lockWaits = async () =>
      Number(
        (
          await db.query(
            "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE DB = ? AND COMMAND = 'Query' AND INFO LIKE 'SELECT%FOR UPDATE'",
            [db.name],
          )
        )[0].n,
      );

    it("answers complete and requeue 401, whatever else is wrong with the call, and writes nothing", async () => {
      const w = await rememberedCredential(["tasks:work"]);
      const t = (await api.post("/v1/tasks", { queue_id: w.q, input: 1 })).json.data.task;
      const claimed = await w.api.post("/v1/worker/claim", { queue_id: w.q }, null);
      assert.equal(claimed.status, 200, claimed.text);
      const attempt = claimed.json.data.attempt_id;
      await revoke(w.id);
      const call = (attemptId: string, verb: string, body: unknown) =>
        w.api.post(`/v1/worker/attempts/${attemptId}:${verb}`, body, null);
      assertError(await call(attempt, "complete", { outcome: "succeeded" }), 401, "UNAUTHENTICATED");
      assertError(await call(attempt, "requeue", {}), 401, "UNAUTHENTICATED");
      // Not 400, 404 or 409: the body, the attempt and its state come after the credential.
      assertError(await call(attempt, "complete", { outcome: "done" }), 401, "UNAUTHENTICATED");
      assertError(
        await call("0123456789abcdef0123456789abcdef", "complete", { outcome: "succeeded" }),
        401,
        "UNAUTHENTICATED",
      );
      assertError(await call("not-an-attempt", "requeue", {}), 401, "UNAUTHENTICATED");
      const now = await taskOf(t.id);
      assert.deepEqual(
        [now.state, now.attempts, now.revision],
        ["RUNNING", 1, "2"],
        "the task is as the claim left it",
      );
      // The attempt is still the task's: a credential that is not revoked completes it.
      const done = await api.post(`/v1/worker/attempts/${attempt}:complete`, { outcome: "succeeded" }, null);
      assert.equal(done.status, 200, done.text);
      assert.equal(done.json.data.task.state, "SUCCEEDED");
    });

    it("answers a claim 401 once the credential the node remembers is revoked, whatever else is wrong, and takes nothing", async () => {
      const w = await rememberedCredential(["tasks:work"]);
      const t = (await api.post("/v1/tasks", { queue_id: w.q, input: 1 })).json.data.task;
      // The node found the credential active: its first claim took t.
      assert.equal((await w.api.post("/v1/worker/claim", { queue_id: w.q, wait_ms: 0 }, null)).status, 200);
      const t2 = (await api.post("/v1/tasks", { queue_id: w.q, input: 2 })).json.data.task;
      await revoke(w.id);
      for (const [path, body] of [
        ["/v1/worker/claim", { queue_id: w.q }],
        ["/v1/worker/claims", { queue_id: w.q, max_tasks: 4 }],
        ["/v1/worker/claim", { queue_id: "0123456789abcdef0123456789abcdef" }],
        ["/v1/worker/claims", { queue_id: w.q, max_tasks: 33 }],
      ] as const)
        assertError(await w.api.post(path, body, null), 401, "UNAUTHENTICATED");
      assert.deepEqual((await taskOf(t2.id)).state, "QUEUED", "the revoked claims took nothing");
      assert.equal((await taskOf(t.id)).state, "RUNNING");
    });

    it("answers 401, not 403, to a revoked credential without the worker's action", async () => {
      const r = await rememberedCredential(["tasks:read"]);
      const t = (await api.post("/v1/tasks", { queue_id: r.q, input: 1 })).json.data.task;
      assert.equal((await r.api.get(`/v1/tasks/${t.id}`)).status, 200);
      assertError(
        await r.api.post(
          `/v1/worker/attempts/0123456789abcdef0123456789abcdef:complete`,
          { outcome: "succeeded" },
          null,
        ),
        403,
        "PERMISSION_DENIED",
      );
      await revoke(r.id);
      assertError(
        await r.api.post(
          `/v1/worker/attempts/0123456789abcdef0123456789abcdef:complete`,
          { outcome: "succeeded" },
          null,
        ),
        401,
        "UNAUTHENTICATED",
      );
      assertError(
        await r.api.post(`/v1/worker/attempts/0123456789abcdef0123456789abcdef:requeue`, {}, null),
        401,
        "UNAUTHENTICATED",
      );
    });

    it("refuses the revoked credential's calls in a batch with an active credential's: those commit, these write nothing", async () => {
      const w = await rememberedCredential(["tasks:work"]);
      const tasks = [];
      for (let i = 0; i < 34; i++)
        tasks.push((await api.post("/v1/tasks", { queue_id: w.q, input: i })).json.data.task);
      const claimOf = async (c: Client) => {
        const res = await c.post("/v1/worker/claim", { queue_id: w.q }, null);
        assert.equal(res.status, 200, res.text);
        return res.json.data as { attempt_id: string; task: { id: string } };
      };
      const complete = (c: Client, a: { attempt_id: string }) =>
        c.post(`/v1/worker/attempts/${a.attempt_id}:complete`, { outcome: "succeeded" }, null);
      const revoked = [];
      const active = [];
      for (let i = 0; i < 16; i++) revoked.push(await claimOf(w.api));
      for (let i = 0; i < 18; i++) active.push(await claimOf(api));
      const held = active.splice(16);
      await revoke(w.id);
      // The node's two batch slots are held by two calls whose tasks are locked here; the
      // 32 calls then wait together and go in one batch (MAX_BATCH 32) once the lock goes.
      const lock = await db.connect();
      await lock.query("BEGIN");
      for (const a of held) await lock.query("SELECT id FROM tasks WHERE id = ? FOR UPDATE", [a.task.id]);
      const metric = async (re: RegExp) => Number(re.exec((await api.get("/metrics")).text)?.[1] ?? NaN);
      const heldCalls = held.map((a) => complete(api, a));
      for (
        const end = Date.now() + 5000;
        (await metric(/^orbit_attempt_calls_waiting (\d+)/m)) > 0 || (await lockWaits()) < 2;
        await sleep(10)
      ) {
        assert.ok(Date.now() < end, "the two held calls did not take the batch slots");
      }
      const batchesBefore = await metric(/^orbit_attempt_batch_size_count (\d+)/m);
      const calls = [...revoked.map((a) => [w.api, a] as const), ...active.map((a) => [api, a] as const)].sort(
        () => Math.random() - 0.5,
      );
      const answering = Promise.all(calls.map(([c, a]) => complete(c, a)));
      for (const end = Date.now() + 5000; (await metric(/^orbit_attempt_calls_waiting (\d+)/m)) < 32; await sleep(10))
        assert.ok(Date.now() < end);
      await lock.query("COMMIT");
      await lock.end();
      const answers = await answering;
      for (const res of await Promise.all(heldCalls)) assert.equal(res.status, 200, res.text);
      assert.equal(
        (await metric(/^orbit_attempt_batch_size_count (\d+)/m)) - batchesBefore,
        1,
        "the 32 calls went in one batch",
      );
      calls.forEach(([c], i) => {
        if (c === api) assert.equal(answers[i]!.status, 200, answers[i]!.text);
        else assertError(answers[i]!, 401, "UNAUTHENTICATED");
      });
      for (const a of revoked) assert.equal((await taskOf(a.task.id)).state, "RUNNING");
      for (const a of active) assert.equal((await taskOf(a.task.id)).state, "SUCCEEDED");
      await waitSequenced(db, cred.namespace_id);
      const ours = new Set(tasks.map((t) => t.id as string));
      const events = (await readLog(db, cred.namespace_id)).events.filter(
        (e) => e.type === "task.succeeded" && ours.has(e.aggregate_id),
      );
      const expected = [...active, ...held].map((a) => a.task.id).sort();
      assert.deepEqual(
        events.map((e) => e.aggregate_id).sort(),
        expected,
        "one event for each active call, none for the revoked",
      );
    });
  });
});

describe("worker calls on an attempt whose lease ran out before any sweep recovered it", function () {
  // A database of its own and one node per test behind a proxy, so that no other node's
  // 1 s sweep gets to the attempts first: a late completion must be 409, not 200
  // (SUCCEEDED), in the up-to-1 s window between the lease's end and the next sweep.
  this.timeout(60000);
  let db: TestDatabase;
  let cred: BootstrapOutput;
  let node: OrbitNode;
  let proxy: Proxy;
  let api: Client;
  let q: string;

  before(async () => {
    db = await freshDatabase("worker_late");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["base"] });
  });
  afterEach(async () => {
    proxy?.release();
    await node?.stop();
    await proxy?.close();
  });
  after(async () => {
    await db?.drop();
  });

  /**
   * A node whose attempt sweep is stalled: its next sweep statement gets no answer until
   * release(), and every later sweep of the node waits behind it (background.ts runs one
   * at a time). Called while no task is RUNNING, so that the stalled statement holds no
   * lock: under READ COMMITTED it keeps the first RUNNING entry past its range locked,
   * and a completion of that task would wait on it. Claims are the only other statements
   * naming `ORDER BY lease_until`: the tests claim once the sweep is stalled.
   */
  async function nodeWithoutSweep(leaseMs: number): Promise<void> {
    proxy = await startProxy(MYSQL_PORT);
    node = await startNode(db.urlVia(proxy), { ORBIT_WORKER_LEASE_MS: String(leaseMs) });
    api = client(node.url, cred.token);
    q = await grantedQueue(db, cred, `late${Date.now()}`);
    proxy.stallWhen("ORDER BY lease_until");
    for (const end = Date.now() + 3000; !proxy.stalled; await sleep(20)) assert.ok(Date.now() < end, "the sweep ran");
  }
  const submit = async (maxAttempts: number) =>
    (await api.post("/v1/tasks", { queue_id: q, input: 1, max_attempts: maxAttempts })).json.data.task;
  const claim = async () => (await api.post("/v1/worker/claim", { queue_id: q }, null)).json.data;
  const call = (attemptId: string, verb: string, body: unknown) =>
    api.post(`/v1/worker/attempts/${attemptId}:${verb}`, body, null);
  const untilPast = (leaseUntil: string) => sleep(Date.parse(leaseUntil) - Date.now() + 30);
  const task = async (id: string) => (await api.get(`/v1/tasks/${id}`)).json.data;
  const eventsOf = async (ids: string[]) => {
    await waitSequenced(db, cred.namespace_id);
    const events = (await readLog(db, cred.namespace_id)).events.filter((e) => ids.includes(e.aggregate_id));
    return events.map((e) => [
      e.aggregate_id,
      e.type,
      e.details.reason,
      e.snapshot.effect_uncertain,
      e.snapshot.current_attempt_id,
    ]);
  };

  it("expires it as the sweep would (a requeue, or FAILED at the limit; once) and answers 409; an earlier completion's repeat is 200", async () => {
    await nodeWithoutSweep(1000);
    const retried = await submit(2);
    const spent = await submit(1);
    const done = await submit(1);
    const [a, b, c] = [await claim(), await claim(), await claim()];
    assert.deepEqual([a.task.id, b.task.id, c.task.id], [retried.id, spent.id, done.id]);
    const first = await call(c.attempt_id, "complete", { outcome: "succeeded" });
    assert.equal(first.status, 200, first.text);
    await untilPast(c.lease_until);

    assertError(await call(a.attempt_id, "complete", { outcome: "succeeded" }), 409, "STATE_CONFLICT");
    // A second late call finds the attempt expired already: 409 again, nothing more written.
    assertError(await call(a.attempt_id, "requeue", { reason: "late" }), 409, "STATE_CONFLICT");
    assertError(await call(b.attempt_id, "requeue", { reason: "late" }), 409, "STATE_CONFLICT");
    // The attempt that was completed in time: its identical repeat still answers 200.
    const repeat = await call(c.attempt_id, "complete", { outcome: "succeeded" });
    assert.equal(repeat.status, 200, repeat.text);
    assert.deepEqual(repeat.json.data.task, first.json.data.task);

    const [ra, rb] = [await task(retried.id), await task(spent.id)];
    assert.deepEqual([ra.state, ra.revision, ra.attempts, ra.result], ["QUEUED", "3", 1, undefined]);
    assert.deepEqual([rb.state, rb.revision, rb.attempts, rb.result], ["FAILED", "3", 1, undefined]);
    assert.deepEqual(await eventsOf([retried.id, spent.id, done.id]), [
      [done.id, "task.succeeded", "WORKER_SUCCEEDED", false, c.attempt_id],
      [retried.id, "task.requeued", "LEASE_EXPIRED", true, a.attempt_id],
      [spent.id, "task.failed", "ATTEMPTS_EXHAUSTED", true, b.attempt_id],
    ]);
    const attempts = await db.query("SELECT ended_by FROM task_attempts WHERE id IN (?, ?)", [
      a.attempt_id,
      b.attempt_id,
    ]);
    assert.deepEqual(
      attempts.map((r) => r.ended_by),
      ["expired", "expired"],
    );
    // The requeued task is claimable at once, as after the sweep.
    const again = await claim();
    assert.equal(again.task.id, retried.id);
    assert.equal(again.task.attempts, 2);
  });

  it("lets the claim that finds an attempt's lease run out recover it and, with nothing else queued, claim its task at once", async () => {
    // A claim reads the queue's expired attempts and its oldest QUEUED task together; with
    // none QUEUED, it reads the queue again after the expiry requeued the task.
    await nodeWithoutSweep(1000);
    const t = await submit(2);
    const first = await claim();
    assert.equal(first.task.id, t.id);
    await untilPast(first.lease_until);
    const second = await claim();
    assert.ok(second, "the requeued task is claimed by the claim that recovered it");
    assert.deepEqual(
      [second.task.id, second.task.state, second.task.attempts, second.task.revision],
      [t.id, "RUNNING", 2, "4"],
    );
    assert.notEqual(second.attempt_id, first.attempt_id);
    assert.deepEqual(await eventsOf([t.id]), [[t.id, "task.requeued", "LEASE_EXPIRED", true, first.attempt_id]]);
  });

  it("lets a cancel after lease_until, before any recovery, cancel the task as RUNNING (effect_uncertain); the worker's late call is then 409", async () => {
    // openapi.yaml ClaimResult.lease_until: until recovered the task reads RUNNING at its
    // claim's revision, and a cancel with that revision takes it (no task.requeued).
    await nodeWithoutSweep(1000);
    const t = await submit(1);
    const a = await claim();
    await untilPast(a.lease_until);
    assert.deepEqual([(await task(t.id)).state, (await task(t.id)).revision], ["RUNNING", "2"]);
    const cancel = await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "2", reason: "late" });
    assert.equal(cancel.status, 200, cancel.text);
    assert.equal(cancel.json.data.task.state, "CANCELLED");
    assertError(await call(a.attempt_id, "complete", { outcome: "succeeded" }), 409, "STATE_CONFLICT");
    assert.deepEqual(await eventsOf([t.id]), [[t.id, "task.cancelled", "CANCEL_REQUESTED", true, a.attempt_id]]);
  });

  it("in a batch: the expired attempt's call is 409 and its expiry commits with the other calls, which answer 200", async () => {
    await nodeWithoutSweep(4000);
    const late = await submit(2);
    const x = await claim();
    // The others are claimed 2.5 s later: their leases still run when x's has run out.
    await sleep(2500);
    const [h0, h1, ok] = [await submit(1), await submit(1), await submit(1)];
    const [c0, c1, p] = [await claim(), await claim(), await claim()];
    await untilPast(x.lease_until);

    // Both batch slots held: one call each, waiting on a task row lock of the test's.
    const lock = await db.connect();
    await lock.query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    await lock.query("START TRANSACTION");
    // One row per statement: on a table of 7 rows an IN list may be read by a scan of the
    // primary key, which would wait on the earlier test's task the stalled sweep holds.
    for (const id of [h0.id, h1.id]) await lock.query("SELECT id FROM tasks WHERE id = ? FOR UPDATE", [id]);
    const lockWaits = async () =>
      Number(
        (
          await db.query(
            "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE DB = ? AND COMMAND = 'Query' AND INFO LIKE 'SELECT%FOR UPDATE'",
            [db.name],
          )
        )[0].n,
      );
    const metric = async (re: RegExp) => Number(re.exec((await api.get("/metrics")).text)?.[1] ?? NaN);
    const held = [call(c0.attempt_id, "complete", { outcome: "succeeded" })];
    for (const end = Date.now() + 5000; (await lockWaits()) < 1; await sleep(10)) assert.ok(Date.now() < end);
    held.push(call(c1.attempt_id, "complete", { outcome: "succeeded" }));
    for (const end = Date.now() + 5000; (await lockWaits()) < 2; await sleep(10)) assert.ok(Date.now() < end);
    // These two wait for a slot, then go together in one transaction.
    const batchesBefore = await metric(/^orbit_attempt_batch_size_count (\d+)/m);
    const inBatch = [
      call(x.attempt_id, "complete", { outcome: "succeeded" }),
      call(p.attempt_id, "complete", { outcome: "succeeded" }),
    ];
    for (const end = Date.now() + 5000; (await metric(/^orbit_attempt_calls_waiting (\d+)/m)) < 2; await sleep(10))
      assert.ok(Date.now() < end);
    await lock.query("COMMIT");
    await lock.end();

    for (const r of await Promise.all(held)) assert.equal(r.status, 200, r.text);
    const [rx, rp] = await Promise.all(inBatch);
    assertError(rx!, 409, "STATE_CONFLICT");
    assert.equal(rp!.status, 200, rp!.text);
    assert.equal(rp!.json.data.task.state, "SUCCEEDED");
    assert.equal(
      await metric(/^orbit_attempt_batch_size_count (\d+)/m),
      batchesBefore + 1,
      "one batch of the two calls",
    );
    assert.equal((await task(late.id)).state, "QUEUED");
    assert.deepEqual(await eventsOf([late.id, ok.id]), [
      [late.id, "task.requeued", "LEASE_EXPIRED", true, x.attempt_id],
      [ok.id, "task.succeeded", "WORKER_SUCCEEDED", false, p.attempt_id],
    ]);
  });
});

// The task API over real HTTP (docs/tasks.md): submit with idempotency, read, cancel and
// resolve, with scope (404), permission (403), validation (400) and state (409) errors,
// and the result event each transition appends.
import { strict as assert } from "node:assert";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, makeCredential, readLog, waitSequenced, type Client, type LoggedEvent } from "../helpers/api.js";
import type { RawResponse } from "../helpers/http.js";
import { assertContract, assertError } from "../helpers/contract.js";
import { claimedTasks, grantedQueue } from "../helpers/fixtures.js";
import * as frames from "../../generated/ws/validators.js";

const ID = "0123456789abcdef0123456789abcdef";
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const validResultEvent = (frames as unknown as Record<string, (d: unknown) => boolean>).ResultEvent!;

describe("tasks", () => {
  let db: TestDatabase;
  let node: OrbitNode;
  let owner: BootstrapOutput;
  let other: BootstrapOutput; // same namespace, only queue "b"
  let api: Client;
  let q: string;

  const submit = (body: unknown, key?: string | null) => api.post("/v1/tasks", body, key);
  const taskCount = async () => {
    const c = await db.connect();
    try {
      return Number(((await c.query<any[]>("SELECT COUNT(*) AS n FROM tasks"))[0] as any[])[0].n);
    } finally {
      await c.end();
    }
  };
  const claim = async (queueId = q) => {
    const res = await api.post("/v1/worker/claim", { queue_id: queueId }, null);
    assert.equal(res.status, 200, res.text);
    return res.json.data as { task: any; attempt_id: string; lease_until: string };
  };

  before(async () => {
    db = await freshDatabase("tasks");
    owner = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["a", "b", "c", "d", "e"] });
    other = await bootstrap(db.url, { namespace: "ns", application: "app2", queues: ["b"] });
    node = await startNode(db.url);
    api = client(node.url, owner.token);
    q = owner.queues[0]!.id;
  });
  after(async () => {
    await node?.stop();
    await db?.drop();
  });

  describe("submit", () => {
    it("creates a QUEUED task: 201 with exactly the task fields", async () => {
      // eslint-disable-next-line no-loss-of-precision -- any number the client sends is a double
      const res = await submit({ queue_id: q, input: { file: "a.png", n: 12345678901234567890 } }, "submit-1");
      assert.equal(res.status, 201, res.text);
      assertContract("submitTask", res);
      const t = res.json.data.task;
      assert.equal(res.json.data.deduplicated, false);
      assert.deepEqual(Object.keys(t).sort(), [
        "attempts",
        "created_at",
        "id",
        "queue_id",
        "revision",
        "state",
        "updated_at",
      ]);
      assert.equal(t.state, "QUEUED");
      assert.equal(t.revision, "1");
      assert.equal(t.attempts, 0);
      assert.equal(t.queue_id, q);
    });

    it("replays the same key and content with 200, deduplicated and the ORIGINAL receipt", async () => {
      const body = { queue_id: q, input: { x: 1 } };
      const first = await submit(body, "submit-replay");
      await claim(); // the task (or an older one) moves on; the receipt must not
      const n = await taskCount();
      const again = await submit(`{ "input" : {"x":1},\n"queue_id":"${q}" }`, "submit-replay");
      assert.equal(again.status, 200, again.text);
      assertContract("submitTask", again);
      assert.equal(again.json.data.deduplicated, true);
      assert.deepEqual(again.json.data.task, first.json.data.task, "the original snapshot, whatever happened since");
      assert.equal(await taskCount(), n, "nothing new written");
    });

    it("refuses the same key with other content: 409 IDEMPOTENCY_CONFLICT, nothing written", async () => {
      // Raw text: these two differ only beyond a double's precision.
      assert.equal(
        (await submit(`{"queue_id":"${q}","input":{"n":12345678901234567890}}`, "submit-conflict")).status,
        201,
      );
      const n = await taskCount();
      const res = await submit(`{"queue_id":"${q}","input":{"n":12345678901234567891}}`, "submit-conflict");
      assertError(res, 409, "IDEMPOTENCY_CONFLICT");
      assertContract("submitTask", res);
      assert.equal(await taskCount(), n);
    });

    it("scopes keys to the credential", async () => {
      const mine = await submit({ queue_id: other.queues[0]!.id, input: 1 }, "shared-key");
      const theirs = await client(node.url, other.token).post(
        "/v1/tasks",
        { queue_id: other.queues[0]!.id, input: 1 },
        "shared-key",
      );
      assert.equal(mine.status, 201);
      assert.equal(theirs.status, 201);
      assert.notEqual(mine.json.data.task.id, theirs.json.data.task.id);
    });

    it("accepts any JSON input up to 256 KiB as sent, and refuses more", async () => {
      for (const input of [null, 0, "text", [1, [2]], { deep: { er: true } }]) {
        assert.equal((await submit({ queue_id: q, input })).status, 201);
      }
      const n = await taskCount();
      const limit = 256 * 1024;
      const big = `{"queue_id":"${q}","input":"${"x".repeat(limit - 1)}"}`; // input text = limit + 1 bytes
      const res = await submit(big);
      assertError(res, 400, "INVALID_ARGUMENT");
      assert.equal(await taskCount(), n);
      const fits = await submit(`{"queue_id":"${q}","input":"${"x".repeat(limit - 2)}"}`);
      assert.equal(fits.status, 201, fits.text);
      // Numbers at the edges of a double's range are kept as their text, precision beyond
      // a double's included (docs/http.md, Bodies).
      for (const text of ["1e308", "-1e-300", "5e-324", "1.5e300", "1234567890.123456789012345678901"]) {
        const res = await submit(`{"queue_id":"${q}","input":{"n":${text}}}`);
        assert.equal(res.status, 201, res.text);
        const c = await db.connect();
        try {
          const [rows] = await c.query<any[]>("SELECT input FROM tasks WHERE id = ?", [res.json.data.task.id]);
          assert.equal(rows[0].input, `{"n":${text}}`);
        } finally {
          await c.end();
        }
      }
    });

    it("refuses numbers beyond a double's range, or fractions it reads as whole, with 400, nothing written", async () => {
      // Orbit's choice (docs/http.md, openapi.yaml JsonValue): RFC 8259 §6; an SDK would read
      // these as infinity, 0 or 100.
      const n = await taskCount();
      for (const text of ["1e400", "-1E+999", "9".repeat(400), "1e-400", "100.000000000000001"]) {
        assertError(await submit(`{"queue_id":"${q}","input":{"n":${text}}}`), 400, "INVALID_ARGUMENT");
      }
      assert.equal(await taskCount(), n);
    });

    it("accepts max_attempts at its limits, 1 and 100", async () => {
      // docs/tasks.md: a task's attempt limit is max_attempts on submit (1–100, default 5).
      for (const max_attempts of [1, 100]) {
        const res = await submit({ queue_id: q, input: 1, max_attempts });
        assert.equal(res.status, 201, res.text);
      }
    });

    it("rejects bad bodies with 400 and writes nothing", async () => {
      const n = await taskCount();
      for (const body of [
        {},
        { queue_id: q },
        { input: 1 },
        { queue_id: q, input: 1, max_attempts: 0 },
        { queue_id: q, input: 1, max_attempts: 101 },
        { queue_id: q, input: 1, extra: true },
        { queue_id: q.toUpperCase(), input: 1 },
      ]) {
        assertError(await submit(body), 400, "INVALID_ARGUMENT");
      }
      assertError(await submit(`{"queue_id":"${q}","input":{"a":1,"a":2}}`), 400, "INVALID_ARGUMENT");
      assertError(await submit({ queue_id: q, input: 1 }, null), 400, "INVALID_ARGUMENT");
      assert.equal(await taskCount(), n);
    });

    it("answers 404 for a queue outside the credential's scope and 403 without tasks:submit", async () => {
      assertError(await client(node.url, other.token).post("/v1/tasks", { queue_id: q, input: 1 }), 404, "NOT_FOUND");
      assertError(await submit({ queue_id: ID, input: 1 }), 404, "NOT_FOUND");
      // The body's queue is the scope: 404 before the Idempotency-Key's 400 (openapi order).
      assertError(await api.post("/v1/tasks", { queue_id: ID, input: 1 }, null), 404, "NOT_FOUND");
      assertError(await api.post("/v1/tasks", { queue_id: q, input: 1 }, null), 400, "INVALID_ARGUMENT");
      const reader = await makeCredential(db, {
        namespaceId: owner.namespace_id,
        applicationId: owner.application_id,
        actions: ["tasks:read"],
        queueIds: [q],
      });
      const res = await client(node.url, reader.token).post("/v1/tasks", { queue_id: q, input: 1 });
      assertError(res, 403, "PERMISSION_DENIED");
    });

    it("takes a key once under concurrent submits: one task, every other answer replays it", async () => {
      const before = await taskCount();
      const body = { queue_id: q, input: { concurrent: true } };
      const answers = await Promise.all(Array.from({ length: 12 }, () => submit(body, "submit-concurrent")));
      assert.deepEqual(
        answers.map((a) => a.status).sort(),
        [200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 201],
      );
      const ids = new Set(answers.map((a) => a.json.data.task.id as string));
      assert.equal(ids.size, 1, "every answer names the one task");
      assert.deepEqual(
        answers.map((a) => a.json.data.deduplicated).filter((d) => d === false),
        [false],
      );
      assert.equal(await taskCount(), before + 1);
    });

    it("refuses a credential revoked since the node last found it: 401 before any other answer, nothing written", async () => {
      // The node authenticates a submit from what it remembers of the credential; the
      // submit's own transaction checks the revocation.
      const c = await makeCredential(db, {
        namespaceId: owner.namespace_id,
        applicationId: owner.application_id,
        actions: ["tasks:submit"],
        queueIds: [q],
      });
      const mine = client(node.url, c.token);
      assert.equal((await mine.post("/v1/tasks", { queue_id: q, input: 1 }, "revoked-first")).status, 201);
      const keys = async () =>
        Number((await db.query("SELECT COUNT(*) AS n FROM idempotency_keys WHERE credential_id = ?", [c.id]))[0].n);
      const [tasks, keysBefore] = [await taskCount(), await keys()];
      await db.query("UPDATE credentials SET revoked_at = UTC_TIMESTAMP(3) WHERE id = ?", [c.id]);
      assertError(await mine.post("/v1/tasks", { queue_id: q, input: 2 }), 401, "UNAUTHENTICATED");
      // A replay of its key, a queue outside its scope, a bad body, no key: 401 all the same.
      assertError(await mine.post("/v1/tasks", { queue_id: q, input: 1 }, "revoked-first"), 401, "UNAUTHENTICATED");
      assertError(await mine.post("/v1/tasks", { queue_id: ID, input: 1 }), 401, "UNAUTHENTICATED");
      assertError(await mine.post("/v1/tasks", { queue_id: q, input: 1, max_attempts: 0 }), 401, "UNAUTHENTICATED");
      assertError(await mine.post("/v1/tasks", { queue_id: q, input: 1 }, null), 401, "UNAUTHENTICATED");
      assert.deepEqual([await taskCount(), await keys()], [tasks, keysBefore]);
    });

    it("commits nothing of a submit whose deadline passed before its transaction could start", async () => {
      // One database connection: submits held in the database keep it one after the other
      // (each held statement ends at its own deadline, the requests' statement limit), and
      // the last submit waits for it past its deadline (503); when it gets the connection it
      // must not write what its client was told failed.
      const own = await startNode(db.url, { ORBIT_DB_POOL_SIZE: "1", ORBIT_REQUEST_TIMEOUT_MS: "1000" });
      const c = await db.connect();
      try {
        const mine = client(own.url, owner.token);
        assert.equal((await mine.post("/v1/tasks", { queue_id: q, input: "warm" })).status, 201);
        await c.query("LOCK TABLES credentials WRITE");
        const held = [mine.post("/v1/tasks", { queue_id: q, input: "held" }, "deadline-held")];
        await sleep(100);
        held.push(mine.post("/v1/tasks", { queue_id: q, input: "held" }, "deadline-held-2"));
        await sleep(100);
        assertError(await mine.post("/v1/tasks", { queue_id: q, input: "late" }, "deadline-late"), 503, "UNAVAILABLE");
        await c.query("UNLOCK TABLES");
        await Promise.all(held);
        await sleep(500);
        const keys = await db.query("SELECT idem_key FROM idempotency_keys WHERE idem_key LIKE 'deadline-%'");
        assert.ok(!keys.some((k) => k.idem_key === "deadline-late"), "the late submit wrote its key");
        assert.equal(Number((await db.query("SELECT COUNT(*) AS n FROM tasks WHERE input = '\"late\"'"))[0].n), 0);
      } finally {
        await c.end();
        await own.stop();
      }
    });

    it("sees a queue granted to the credential after the node remembered it", async () => {
      // No API widens a credential; an operator's change in the database is seen by the
      // next submit all the same, though the node remembered the credential without it.
      assert.equal((await submit({ queue_id: q, input: 1 })).status, 201);
      const granted = await grantedQueue(db, owner, "granted-late");
      const res = await submit({ queue_id: granted, input: 1 });
      assert.equal(res.status, 201, res.text);
      assert.equal(res.json.data.task.queue_id, granted);
    });
  });

  describe("read", () => {
    it("returns the task to a credential with the queue in scope, 404 to others", async () => {
      const t = (await submit({ queue_id: q, input: 1 })).json.data.task;
      const res = await api.get(`/v1/tasks/${t.id}`);
      assert.equal(res.status, 200);
      assertContract("getTask", res);
      assert.deepEqual(res.json.data, t);
      assertError(await client(node.url, other.token).get(`/v1/tasks/${t.id}`), 404, "NOT_FOUND");
      assertError(await api.get(`/v1/tasks/${ID}`), 404, "NOT_FOUND");
      assertError(await api.get(`/v1/tasks/${t.id.toUpperCase()}`), 404, "NOT_FOUND");
      const worker = await makeCredential(db, {
        namespaceId: owner.namespace_id,
        applicationId: owner.application_id,
        actions: ["tasks:work"],
        queueIds: [q],
      });
      assertError(await client(node.url, worker.token).get(`/v1/tasks/${t.id}`), 403, "PERMISSION_DENIED");
    });
  });

  describe("cancel", () => {
    it("cancels a QUEUED task with a task.cancelled event; a replay changes nothing", async () => {
      const t = (await submit({ queue_id: q, input: 1 })).json.data.task;
      const body = { expected_revision: "1", reason: "customer withdrew" };
      const res = await api.post(`/v1/tasks/${t.id}:cancel`, body, "cancel-1");
      assert.equal(res.status, 200, res.text);
      assertContract("cancelTask", res);
      assert.equal(res.json.data.task.state, "CANCELLED");
      assert.equal(res.json.data.task.revision, "2");
      assert.equal(res.json.data.deduplicated, false);
      const replay = await api.post(`/v1/tasks/${t.id}:cancel`, body, "cancel-1");
      assert.equal(replay.status, 200);
      assert.equal(replay.json.data.deduplicated, true);
      assert.deepEqual(replay.json.data.task, res.json.data.task);
      await waitSequenced(db, owner.namespace_id);
      const events = (await readLog(db, owner.namespace_id)).events.filter((e) => e.aggregate_id === t.id);
      assert.equal(events.length, 1, "one event, not two");
      const e = events[0]!;
      assert.equal(e.type, "task.cancelled");
      assert.deepEqual(e.details, { state: "CANCELLED", reason: "CANCEL_REQUESTED" });
      assert.deepEqual(e.snapshot, {
        schema_version: 1,
        task_id: t.id,
        queue_id: q,
        state: "CANCELLED",
        revision: "2",
        effect_uncertain: false,
      });
      assert.equal(e.aggregate_revision, "2");
    });

    it("cancels a RUNNING task with effect_uncertain and names its attempt", async () => {
      const qc = owner.queues[2]!.id;
      const t = (await submit({ queue_id: qc, input: 1 })).json.data.task;
      const c = await claim(qc);
      assert.equal(c.task.id, t.id);
      const res = await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "2", reason: "stop" });
      assert.equal(res.status, 200, res.text);
      await waitSequenced(db, owner.namespace_id);
      const e = (await readLog(db, owner.namespace_id)).events.find((x) => x.aggregate_id === t.id)!;
      assert.equal(e.snapshot.effect_uncertain, true);
      assert.equal(e.snapshot.current_attempt_id, c.attempt_id);
      assert.ok(validResultEvent({ ...e, aggregate_kind: "task", occurred_at: "2026-01-01T00:00:00.000Z" }));
      const done = await api.post(`/v1/worker/attempts/${c.attempt_id}:complete`, { outcome: "succeeded" }, null);
      assertError(done, 409, "STATE_CONFLICT");
    });

    /** Transactions this node ran again after a deadlock or a lock wait timeout. */
    const retries = async () => {
      const text = (await api.get("/metrics")).text;
      return [...text.matchAll(/^orbit_database_retries_total\{[^}]*\} (\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0);
    };
    /** One of the pair answered 200, the other 409; the task's state and its one event are the winner's. */
    async function decidedOnce(
      events: LoggedEvent[],
      taskId: string,
      cancel: RawResponse,
      complete: RawResponse,
    ): Promise<void> {
      assert.deepEqual([cancel.status, complete.status].sort(), [200, 409], `${cancel.text} ${complete.text}`);
      const cancelled = cancel.status === 200;
      assertError(cancelled ? complete : cancel, 409, "STATE_CONFLICT");
      assert.equal((await api.get(`/v1/tasks/${taskId}`)).json.data.state, cancelled ? "CANCELLED" : "SUCCEEDED");
      const mine = events.filter((e) => e.aggregate_id === taskId).map((e) => e.type);
      assert.deepEqual(mine, [cancelled ? "task.cancelled" : "task.succeeded"]);
    }
    const lockWaits = async () =>
      Number(
        (
          await db.query(
            "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE DB = ? AND COMMAND = 'Query' AND INFO LIKE 'SELECT%FOR UPDATE'",
            [db.name],
          )
        )[0].n,
      );
    async function untilLockWaits(n: number): Promise<void> {
      for (const end = Date.now() + 10000; (await lockWaits()) < n; await sleep(10))
        assert.ok(Date.now() < end, `${n} lock waits`);
    }

    it("takes a cancel's and a completion's locks in one order: no deadlock when both wait for the task", async () => {
      // Cancel locks the task, then updates its attempt. A completion that locked the
      // attempt, then the task, would deadlock with it here: both held back on the task row
      // by the test, cancel first, so once released cancel gets the task and waits for the
      // attempt, which the completion holds while it waits for the task (InnoDB fails one,
      // withTransaction runs it again: orbit_database_retries_total goes up).
      const qr = await grantedQueue(db, owner, "lock-order");
      const { taskId, attemptId } = (await claimedTasks(api, qr, 1))[0]!;
      const before = await retries();
      const lock = await db.connect();
      await lock.query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
      await lock.query("START TRANSACTION");
      await lock.query("SELECT id FROM tasks WHERE id = ? FOR UPDATE", [taskId]);
      const cancel = api.post(`/v1/tasks/${taskId}:cancel`, { expected_revision: "2", reason: "race" });
      await untilLockWaits(1);
      const complete = api.post(`/v1/worker/attempts/${attemptId}:complete`, { outcome: "succeeded" }, null);
      await untilLockWaits(2);
      await lock.query("COMMIT");
      await lock.end();
      const [c, w] = await Promise.all([cancel, complete]);
      await waitSequenced(db, owner.namespace_id);
      await decidedOnce((await readLog(db, owner.namespace_id)).events, taskId, c!, w!);
      assert.equal((await retries()) - before, 0, "transactions retried after a deadlock or lock wait timeout");
    });

    it("decides 200 concurrent cancel and complete pairs once each, without a deadlock to retry", async () => {
      // The same race left to timing.
      const qr = await grantedQueue(db, owner, "race");
      const running = await claimedTasks(api, qr, 200);
      const before = await retries();
      const answers = await Promise.all(
        running.map(async ({ taskId, attemptId }, i) => {
          const cancel = () => api.post(`/v1/tasks/${taskId}:cancel`, { expected_revision: "2", reason: "race" });
          const complete = () => api.post(`/v1/worker/attempts/${attemptId}:complete`, { outcome: "succeeded" }, null);
          // Either may start first.
          const [c, w] =
            i % 2 === 0
              ? await Promise.all([cancel(), complete()])
              : (await Promise.all([complete(), cancel()])).reverse();
          return { taskId, cancel: c!, complete: w! };
        }),
      );
      await waitSequenced(db, owner.namespace_id);
      const events = (await readLog(db, owner.namespace_id)).events;
      for (const a of answers) await decidedOnce(events, a.taskId, a.cancel, a.complete);
      assert.equal((await retries()) - before, 0, "transactions retried after a deadlock or lock wait timeout");
    });

    it("refuses a wrong revision or a finished task with 409, and bad input with 400", async () => {
      const t = (await submit({ queue_id: q, input: 1 })).json.data.task;
      assertError(
        await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "7", reason: "x" }),
        409,
        "STATE_CONFLICT",
      );
      const leadingZero = await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "01", reason: "x" });
      assertError(leadingZero, 400, "INVALID_ARGUMENT");
      // The rule in words, not the uint64 pattern's hundreds of characters of regular expression.
      assert.equal(
        leadingZero.json.error.message,
        "body field expected_revision: must be a canonical decimal uint64 (0 to 18446744073709551615; no sign, leading zero, fraction, exponent or whitespace)",
      );
      assertError(
        await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "" }),
        400,
        "INVALID_ARGUMENT",
      );
      assertError(
        await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "x".repeat(1025) }),
        400,
        "INVALID_ARGUMENT",
      );
      assertError(await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1" }), 400, "INVALID_ARGUMENT");
      // docs/tasks.md: cancel takes an Idempotency-Key; without one it is 400 and writes nothing.
      assertError(
        await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "x" }, null),
        400,
        "INVALID_ARGUMENT",
      );
      // 1024 Unicode characters (2048 UTF-16 units) is within the limit.
      const ok = await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "😀".repeat(1024) });
      assert.equal(ok.status, 200, ok.text);
      assertError(
        await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "2", reason: "again" }),
        409,
        "STATE_CONFLICT",
      );
      assertError(
        await client(node.url, other.token).post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "2", reason: "x" }),
        404,
        "NOT_FOUND",
      );
    });
  });

  describe("keys, tokens and actions on task writes", () => {
    it("replays cancel by key, refuses the key with other content, and checks 401/403 first", async () => {
      const t = (await submit({ queue_id: q, input: 1 })).json.data.task;
      const first = await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "a" }, "cancel-key");
      assert.equal(first.status, 200);
      const conflict = await api.post(
        `/v1/tasks/${t.id}:cancel`,
        { expected_revision: "1", reason: "b" },
        "cancel-key",
      );
      assertError(conflict, 409, "IDEMPOTENCY_CONFLICT");
      const t2 = (await submit({ queue_id: q, input: 2 })).json.data.task;
      const otherTarget = await api.post(
        `/v1/tasks/${t2.id}:cancel`,
        { expected_revision: "1", reason: "a" },
        "cancel-key",
      );
      assertError(otherTarget, 409, "IDEMPOTENCY_CONFLICT");
      assert.equal((await api.get(`/v1/tasks/${t2.id}`)).json.data.state, "QUEUED", "the other task was not cancelled");
      const noToken = await client(node.url, "orbit_nope").post(`/v1/tasks/${t2.id}:cancel`, {
        expected_revision: "1",
        reason: "a",
      });
      assertError(noToken, 401, "UNAUTHENTICATED");
      const submitter = await makeCredential(db, {
        namespaceId: owner.namespace_id,
        applicationId: owner.application_id,
        actions: ["tasks:submit"],
        queueIds: [q],
      });
      const sub = client(node.url, submitter.token);
      assertError(
        await sub.post(`/v1/tasks/${t2.id}:cancel`, { expected_revision: "1", reason: "a" }),
        403,
        "PERMISSION_DENIED",
      );
      assertError(
        await sub.post(`/v1/tasks/${t2.id}:resolve`, { expected_revision: "1", outcome: "failed", reason: "a" }),
        403,
        "PERMISSION_DENIED",
      );
      assertError(await sub.post(`/v1/tasks/${t2.id}:resolve`, { bad: true }), 403, "PERMISSION_DENIED");
    });

    it("scopes a task write's key to its operation kind, and a resolve's content includes its task", async () => {
      // The idempotency rule of docs/protocol.md (task routes too): keys are scoped to
      // (credential, operation kind), and a replay is the same canonical body AND target.
      const qe = owner.queues[4]!.id;
      const key = "kind-key";
      const t = (await submit({ queue_id: qe, input: 1 }, key)).json.data.task;
      const cancelled = await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "x" }, key);
      assert.equal(cancelled.status, 200, cancelled.text);
      assert.equal(cancelled.json.data.deduplicated, false);
      assert.equal(cancelled.json.data.task.state, "CANCELLED");
      const review = async () => {
        const task = (await submit({ queue_id: qe, input: 2 })).json.data.task;
        const c = await claim(qe);
        assert.equal(c.task.id, task.id);
        const done = await api.post(`/v1/worker/attempts/${c.attempt_id}:complete`, { outcome: "needs_review" }, null);
        assert.equal(done.json.data.task.state, "NEEDS_REVIEW", done.text);
        return done.json.data.task;
      };
      const [a, b] = [await review(), await review()];
      assert.equal(a.revision, b.revision);
      const body = { expected_revision: a.revision, outcome: "succeeded", reason: "checked" };
      const resolved = await api.post(`/v1/tasks/${a.id}:resolve`, body, key);
      assert.equal(resolved.status, 200, resolved.text);
      assert.equal(resolved.json.data.deduplicated, false);
      assert.equal(resolved.json.data.task.state, "SUCCEEDED");
      // The same key and body on another task is another content: refused, B untouched.
      assertError(await api.post(`/v1/tasks/${b.id}:resolve`, body, key), 409, "IDEMPOTENCY_CONFLICT");
      const after = (await api.get(`/v1/tasks/${b.id}`)).json.data;
      assert.equal(after.state, "NEEDS_REVIEW");
      assert.equal(after.revision, b.revision);
    });
  });

  describe("resolve", () => {
    it("resolves NEEDS_REVIEW into a second, distinct authoritative event", async () => {
      const qd = owner.queues[3]!.id;
      const t = (await submit({ queue_id: qd, input: 1 })).json.data.task;
      const c = await claim(qd);
      const done = await api.post(
        `/v1/worker/attempts/${c.attempt_id}:complete`,
        { outcome: "needs_review", result: { score: 0.5 } },
        null,
      );
      assert.equal(done.status, 200, done.text);
      assert.equal(done.json.data.task.state, "NEEDS_REVIEW");
      const rev = done.json.data.task.revision;
      assertError(
        await api.post(`/v1/tasks/${t.id}:resolve`, { expected_revision: "1", outcome: "succeeded", reason: "ok" }),
        409,
        "STATE_CONFLICT",
      );
      assertError(
        await api.post(`/v1/tasks/${t.id}:resolve`, { expected_revision: rev, outcome: "maybe", reason: "ok" }),
        400,
        "INVALID_ARGUMENT",
      );
      // docs/tasks.md: resolve takes an Idempotency-Key; without one it is 400 and writes nothing.
      assertError(
        await api.post(
          `/v1/tasks/${t.id}:resolve`,
          { expected_revision: rev, outcome: "succeeded", reason: "ok" },
          null,
        ),
        400,
        "INVALID_ARGUMENT",
      );
      const resolveBody = { expected_revision: rev, outcome: "succeeded", reason: "checked by hand" };
      const res = await api.post(`/v1/tasks/${t.id}:resolve`, resolveBody, "resolve-1");
      assert.equal(res.status, 200, res.text);
      const replay = await api.post(`/v1/tasks/${t.id}:resolve`, resolveBody, "resolve-1");
      assert.equal(replay.json.data.deduplicated, true);
      assert.deepEqual(replay.json.data.task, res.json.data.task);
      assertError(
        await api.post(`/v1/tasks/${t.id}:resolve`, { ...resolveBody, outcome: "failed" }, "resolve-1"),
        409,
        "IDEMPOTENCY_CONFLICT",
      );
      assertContract("resolveTask", res);
      assert.equal(res.json.data.task.state, "SUCCEEDED");
      assert.equal(res.json.data.task.result, '{"score":0.5}', "no result sent: the worker's result stays");
      assertError(
        await api.post(`/v1/tasks/${t.id}:resolve`, {
          expected_revision: res.json.data.task.revision,
          outcome: "failed",
          reason: "no",
        }),
        409,
        "STATE_CONFLICT",
      );
      await waitSequenced(db, owner.namespace_id);
      const events = (await readLog(db, owner.namespace_id)).events.filter((e) => e.aggregate_id === t.id);
      assert.deepEqual(
        events.map((e) => e.type),
        ["task.needs_review", "task.succeeded"],
      );
      assert.notEqual(events[0]!.id, events[1]!.id);
      assert.deepEqual(
        events.map((e) => e.details.reason),
        ["WORKER_NEEDS_REVIEW", "REVIEW_SUCCEEDED"],
      );
      // openapi.yaml: effect_uncertain only for a cancel while RUNNING or a last lease run out.
      assert.deepEqual(
        events.map((e) => e.snapshot.effect_uncertain),
        [false, false],
      );
      for (const e of events)
        assert.ok(
          validResultEvent({ ...e, aggregate_kind: "task", occurred_at: "2026-01-01T00:00:00.000Z" }),
          JSON.stringify(e),
        );
    });
  });
});

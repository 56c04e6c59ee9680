// Every task state × every operation on it (docs/tasks.md):
// each answers its documented result or a clean 409 STATE_CONFLICT, bumps the revision
// exactly when the state changes, and writes exactly the documented events — one per
// result or requeue, none for a claim or a refusal — in a gapless stream.
import { strict as assert } from "node:assert";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, readLog, waitSequenced, type Client } from "../helpers/api.js";
import { assertError } from "../helpers/contract.js";
import { grantedQueue } from "../helpers/fixtures.js";

type State = "QUEUED" | "RUNNING" | "SUCCEEDED" | "FAILED" | "CANCELLED" | "NEEDS_REVIEW";
const STATES: State[] = ["QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "NEEDS_REVIEW"];

interface Made {
  q: string;
  id: string;
  revision: string;
  /** The attempt that brought the task here, if any. */
  attempt?: string;
  /** The body that ended that attempt, if a worker's call did. */
  endBody?: unknown;
}

describe("task state × operation", function () {
  this.timeout(120000);
  let db: TestDatabase;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  let api: Client;
  let n = 0;

  before(async () => {
    db = await freshDatabase("taskmatrix");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["base"] });
    node = await startNode(db.url);
    api = client(node.url, cred.token);
  });
  after(async () => {
    await node?.stop();
    await db?.drop();
  });

  const ok = async (p: Promise<{ status: number; text: string; json: any }>) => {
    const res = await p;
    assert.ok(res.status === 200 || res.status === 201, res.text);
    return res.json.data;
  };
  const complete = (a: string, body: unknown) => api.post(`/v1/worker/attempts/${a}:complete`, body, null);
  const requeue = (a: string, body: unknown) => api.post(`/v1/worker/attempts/${a}:requeue`, body, null);

  /** A task in `state`, on a queue of its own. */
  async function make(state: State): Promise<Made> {
    const q = await grantedQueue(db, cred, `m${++n}`);
    const t = (await ok(api.post("/v1/tasks", { queue_id: q, input: { n } }))).task;
    if (state === "QUEUED") return { q, id: t.id, revision: t.revision };
    if (state === "CANCELLED") {
      const c = (await ok(api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" }))).task;
      return { q, id: t.id, revision: c.revision };
    }
    const c = await ok(api.post("/v1/worker/claim", { queue_id: q }, null));
    if (state === "RUNNING") return { q, id: t.id, revision: c.task.revision, attempt: c.attempt_id };
    const outcome = { SUCCEEDED: "succeeded", FAILED: "failed", NEEDS_REVIEW: "needs_review" }[state];
    const endBody = { outcome, result: { s: state } };
    const done = (await ok(complete(c.attempt_id, endBody))).task;
    assert.equal(done.state, state);
    return { q, id: t.id, revision: done.revision, attempt: c.attempt_id, endBody };
  }

  const eventsOf = async (taskId: string) => {
    await waitSequenced(db, cred.namespace_id);
    return (await readLog(db, cred.namespace_id)).events.filter((e) => e.aggregate_id === taskId);
  };
  const current = async (id: string) => (await api.get(`/v1/tasks/${id}`)).json.data;

  /**
   * Runs `op` on a task in `state`; `expect` is the state it moves to (one event of
   * `event`, revision + 1) or undefined for a 409 that changes and writes nothing.
   */
  async function check(
    state: State,
    op: (m: Made) => Promise<any>,
    expect?: { to: State; event: string; reason: string },
  ) {
    const m = await make(state);
    const before = await eventsOf(m.id);
    const res = await op(m);
    const after = await current(m.id);
    const added = (await eventsOf(m.id)).slice(before.length);
    if (!expect) {
      assertError(res, 409, "STATE_CONFLICT");
      assert.equal(after.state, state, `${state}: unchanged`);
      assert.equal(after.revision, m.revision, `${state}: revision unchanged`);
      assert.deepEqual(added, [], `${state}: no event`);
      return;
    }
    assert.equal(res.status, 200, `${state}: ${res.text}`);
    assert.equal(after.state, expect.to);
    assert.equal(after.revision, String(BigInt(m.revision) + 1n), `${state}: one revision per change`);
    assert.deepEqual(
      added.map((e) => [e.type, e.details.state, e.details.reason, e.aggregate_revision]),
      [[expect.event, expect.to, expect.reason, after.revision]],
      `${state}: exactly one event`,
    );
  }

  it("cancel: QUEUED and RUNNING become CANCELLED; every other state is 409", async () => {
    const cancel = (m: Made) => api.post(`/v1/tasks/${m.id}:cancel`, { expected_revision: m.revision, reason: "r" });
    for (const s of STATES) {
      const to =
        s === "QUEUED" || s === "RUNNING"
          ? { to: "CANCELLED" as const, event: "task.cancelled", reason: "CANCEL_REQUESTED" }
          : undefined;
      await check(s, cancel, to);
    }
  });

  it("resolve: only NEEDS_REVIEW moves, to SUCCEEDED or FAILED; every other state is 409", async () => {
    for (const outcome of ["succeeded", "failed"] as const) {
      const resolve = (m: Made) =>
        api.post(`/v1/tasks/${m.id}:resolve`, { expected_revision: m.revision, outcome, reason: "r" });
      for (const s of STATES) {
        const to =
          outcome === "succeeded"
            ? { to: "SUCCEEDED" as const, event: "task.succeeded", reason: "REVIEW_SUCCEEDED" }
            : { to: "FAILED" as const, event: "task.failed", reason: "REVIEW_FAILED" };
        await check(s, resolve, s === "NEEDS_REVIEW" ? to : undefined);
      }
    }
  });

  it("complete and requeue of the attempt: RUNNING moves; an ended attempt takes only its identical repeat (200, nothing written)", async () => {
    const outcomes = {
      succeeded: { to: "SUCCEEDED", event: "task.succeeded", reason: "WORKER_SUCCEEDED" },
      failed: { to: "FAILED", event: "task.failed", reason: "WORKER_FAILED" },
      needs_review: { to: "NEEDS_REVIEW", event: "task.needs_review", reason: "WORKER_NEEDS_REVIEW" },
    } as const;
    for (const [outcome, to] of Object.entries(outcomes))
      await check("RUNNING", (m) => complete(m.attempt!, { outcome }), to);
    await check("RUNNING", (m) => requeue(m.attempt!, { reason: "r" }), {
      to: "QUEUED",
      event: "task.requeued",
      reason: "WORKER_REQUEUED",
    });
    for (const s of ["SUCCEEDED", "FAILED", "NEEDS_REVIEW"] as const) {
      await check(s, (m) => complete(m.attempt!, { outcome: "succeeded", result: { other: 1 } }));
      await check(s, (m) => requeue(m.attempt!, { reason: "r" }));
      // The identical repeat: 200 with the current task, nothing written.
      const m = await make(s);
      const before = await eventsOf(m.id);
      const again = await complete(m.attempt!, m.endBody);
      assert.equal(again.status, 200, again.text);
      assert.equal(again.json.data.task.revision, m.revision);
      assert.equal((await eventsOf(m.id)).length, before.length);
    }
  });

  it("claim takes only a QUEUED task (one revision, no event)", async () => {
    for (const s of STATES) {
      const m = await make(s);
      const before = await eventsOf(m.id);
      const res = await api.post("/v1/worker/claim", { queue_id: m.q }, null);
      if (s === "QUEUED") {
        assert.equal(res.status, 200, res.text);
        assert.equal(res.json.data.task.state, "RUNNING");
        assert.equal(res.json.data.task.revision, String(BigInt(m.revision) + 1n));
      } else {
        assert.equal(res.status, 204, `${s}: ${res.text}`);
        assert.equal((await current(m.id)).revision, m.revision);
      }
      assert.equal((await eventsOf(m.id)).length, before.length, `${s}: a claim writes no event`);
    }
  });

  it("gives a task 5 attempts by default: the fifth requeue fails it (ATTEMPTS_EXHAUSTED), after four task.requeued", async () => {
    const q = await grantedQueue(db, cred, `m${++n}`);
    const t = (await ok(api.post("/v1/tasks", { queue_id: q, input: 1 }))).task;
    let last: any;
    for (let i = 1; i <= 5; i++) {
      const c = await ok(api.post("/v1/worker/claim", { queue_id: q }, null));
      assert.equal(c.task.attempts, i);
      last = (await ok(requeue(c.attempt_id, { reason: "r" }))).task;
    }
    assert.equal(last.state, "FAILED");
    assert.equal((await api.post("/v1/worker/claim", { queue_id: q }, null)).status, 204);
    const events = (await eventsOf(t.id)).map((e) => [e.type, e.details.reason]);
    assert.deepEqual(events, [
      ...Array(4).fill(["task.requeued", "WORKER_REQUEUED"]),
      ["task.failed", "ATTEMPTS_EXHAUSTED"],
    ]);
  });

  it("puts a requeued task at the back of its queue, behind a task submitted while it ran", async () => {
    const q = await grantedQueue(db, cred, `m${++n}`);
    const first = (await ok(api.post("/v1/tasks", { queue_id: q, input: 1 }))).task;
    const c = await ok(api.post("/v1/worker/claim", { queue_id: q }, null));
    assert.equal(c.task.id, first.id);
    const second = (await ok(api.post("/v1/tasks", { queue_id: q, input: 2 }))).task;
    await ok(requeue(c.attempt_id, { reason: "r" }));
    const next = await ok(api.post("/v1/worker/claim", { queue_id: q }, null));
    assert.equal(next.task.id, second.id, "the task submitted meanwhile comes first");
    assert.equal((await ok(api.post("/v1/worker/claim", { queue_id: q }, null))).task.id, first.id);
  });

  it("leaves the namespace's stream gapless: sequences 1..head, each event once", async () => {
    await waitSequenced(db, cred.namespace_id);
    const { head, events } = await readLog(db, cred.namespace_id);
    assert.deepEqual(
      events.map((e) => e.sequence),
      Array.from({ length: Number(head) }, (_, i) => String(i + 1)),
    );
    assert.equal(new Set(events.map((e) => e.id)).size, events.length);
  });
});

// The automatic Worker against a real node: batch claims bounded by its concurrency, batch
// completions with the handler's results, a throwing handler's task requeued, a refused
// completion reported, a claim refused for good ending it, and the bounded drain of stop().
import { strict as assert } from "node:assert";
import { spawn } from "node:child_process";
import path from "node:path";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { grantedQueue } from "../helpers/fixtures.js";
import {
  OrbitClient,
  OrbitNetworkError,
  Worker,
  type RefusedCompletion,
  type WorkerOptions,
} from "../../src/sdk/index.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("Worker", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  let orbit: OrbitClient;
  let queues = 0;

  async function until(cond: () => Promise<boolean> | boolean, ms = 15000): Promise<void> {
    for (const end = Date.now() + ms; !(await cond());) {
      assert.ok(Date.now() < end, "condition not reached in time");
      await sleep(50);
    }
  }
  /** A queue of the test's own, with n tasks submitted on it. */
  async function queueWith(n: number): Promise<{ q: string; ids: string[] }> {
    const q = await grantedQueue(db, cred, `w${queues++}`);
    const ids = [];
    for (let i = 0; i < n; i++) ids.push((await orbit.submitTask(`${q}-${i}`, { queue_id: q, input: i })).task.id);
    return { q, ids };
  }
  /** How many requests of the operation the node has answered 200 so far (GET /metrics). */
  async function answered(route: string): Promise<number> {
    const metrics = await (await fetch(`${node.url}/metrics`)).text();
    const line = new RegExp(`^orbit_http_requests_total\\{route="${route}",status="200"\\} (\\d+)`, "m").exec(metrics);
    return Number(line?.[1] ?? 0);
  }
  const worker = (o: Partial<WorkerOptions> & Pick<WorkerOptions, "queueId" | "handler">) =>
    new Worker({ baseUrl: node.url, token: cred.token, waitMs: 1000, ...o });

  before(async () => {
    db = await freshDatabase("sdk_worker");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["base"] });
    node = await startNode(db.url);
    orbit = new OrbitClient({ baseUrl: node.url, token: cred.token });
  });
  after(async () => {
    await node?.stop();
    await db?.drop();
  });

  it("runs every task to SUCCEEDED with its handler's result, never more than `concurrency` handlers at once", async () => {
    const { q, ids } = await queueWith(20);
    let running = 0;
    let most = 0;
    let calls = 0;
    const errors: unknown[] = [];
    const w = worker({
      queueId: q,
      concurrency: 4,
      onError: (e) => void errors.push(e),
      handler: async (task, ctx) => {
        calls++;
        most = Math.max(most, ++running);
        assert.match(ctx.attemptId, /^[0-9a-f]{32}$/);
        assert.ok(!ctx.signal.aborted);
        await sleep(20 + Math.random() * 60);
        running--;
        return { outcome: "succeeded", result: { id: task.id } };
      },
    }).start();
    await until(async () =>
      (await Promise.all(ids.map((id) => orbit.getTask(id)))).every((t) => t.state === "SUCCEEDED"),
    );
    assert.deepEqual(await w.stop(), { stopped: true });
    for (const id of ids) {
      const t = await orbit.getTask(id);
      assert.deepEqual(JSON.parse(t.result!), { id });
      assert.equal(t.attempts, 1);
    }
    assert.equal(calls, 20, "each task handled once");
    assert.equal(most, 4, "up to concurrency handlers, never more");
    assert.deepEqual(errors, []);
  });

  it("sends the completions that finish while a completions request is in flight together in the next", async () => {
    const { q, ids } = await queueWith(8);
    const requests = () => answered("completeAttempts");
    const before = await requests();
    let release!: () => void;
    const together = new Promise<void>((r) => (release = r));
    let started = 0;
    const w = worker({
      queueId: q,
      concurrency: 8,
      handler: async (task) => {
        if (++started === 8) release();
        await together; // all eight finish in one turn: the first is sent, seven wait
        return { outcome: "succeeded", result: task.id };
      },
    }).start();
    await until(async () =>
      (await Promise.all(ids.map((id) => orbit.getTask(id)))).every((t) => t.state === "SUCCEEDED"),
    );
    await w.stop();
    assert.equal((await requests()) - before, 2, "eight completions in two requests");
  });

  /**
   * A worker of concurrency 16 runs 160 tasks: the first `slow` handlers end on their own
   * once the `releaseAt`-th handler has started, while a claim is under way; the claim that
   * answers then finds `slow` slots free and the rest about to be. Returns the claims made.
   */
  async function claimsWithSlowHandlers(slow: number, releaseAt: number): Promise<number> {
    const { q, ids } = await queueWith(160);
    const before = await answered("claimTasks");
    let calls = 0;
    let release!: () => void;
    const slowDone = new Promise<void>((r) => (release = r));
    const w = worker({
      queueId: q,
      concurrency: 16,
      handler: async (task) => {
        const call = ++calls;
        if (call === releaseAt) setTimeout(release, 0);
        if (call <= slow) await slowDone;
        return { outcome: "succeeded", result: task.id };
      },
    }).start();
    await until(() => calls === 160);
    assert.deepEqual(await w.stop(), { stopped: true });
    const made = (await answered("claimTasks")) - before;
    const states = await Promise.all(ids.map(async (id) => (await orbit.getTask(id)).state));
    assert.ok(
      states.every((st) => st === "SUCCEEDED"),
      "every task completed",
    );
    return made;
  }

  // 160 tasks in claims of 16 are 10 (and the last long-poll); split claims are 18 or more.
  it("claims the slots freed together in one claim, after a claim answered with fewer than asked", async () => {
    const made = await claimsWithSlowHandlers(1, 31);
    assert.ok(made <= 13, `${made} claims for 160 tasks (split: one slot, then fifteen)`);
  });

  it("claims the slots freed together in one claim when half of them were freed apart", async () => {
    const made = await claimsWithSlowHandlers(8, 17);
    assert.ok(made <= 13, `${made} claims for 160 tasks (split: eight and eight)`);
  });

  it("requeues the task of a throwing handler, reports it, and a later claim completes it", async () => {
    const { q, ids } = await queueWith(1);
    const errors: { e: unknown; attempt: { attemptId: string; taskId: string } | undefined }[] = [];
    let calls = 0;
    const w = worker({
      queueId: q,
      concurrency: 1,
      onError: (e, attempt) => void errors.push({ e, attempt }),
      handler: async () => {
        if (++calls === 1) throw new Error("disk full");
        return { outcome: "succeeded", result: "second time" };
      },
    }).start();
    await until(async () => (await orbit.getTask(ids[0]!)).state === "SUCCEEDED");
    await w.stop();
    const t = await orbit.getTask(ids[0]!);
    assert.equal(t.attempts, 2, "the requeue used an attempt, the second claim another");
    assert.equal(t.result, '"second time"');
    assert.equal(calls, 2);
    assert.equal(errors.length, 1);
    assert.match(String(errors[0]!.e), /disk full/);
    assert.equal(errors[0]!.attempt?.taskId, ids[0]);
  });

  it("drains on stop: the running handler finishes and its completion lands before stop resolves", async () => {
    const { q, ids } = await queueWith(3);
    let started = 0;
    const w = worker({
      queueId: q,
      concurrency: 1,
      handler: async () => {
        started++;
        await sleep(500);
        return { outcome: "failed", error: "no luck" };
      },
    }).start();
    await until(() => started === 1);
    const t0 = Date.now();
    assert.deepEqual(await w.stop({ deadlineMs: 5000 }), { stopped: true });
    assert.ok(Date.now() - t0 < 2000, `stop took ${Date.now() - t0} ms`);
    assert.equal(started, 1, "nothing claimed while draining");
    const states = await Promise.all(ids.map(async (id) => (await orbit.getTask(id)).state));
    assert.deepEqual(states, ["FAILED", "QUEUED", "QUEUED"], "the completion landed; nothing else was taken");

    // An idle worker long-polling: stop() gives up the claim instead of waiting it out.
    const idle = worker({ queueId: q, waitMs: 20000, handler: async () => ({ outcome: "succeeded" }) });
    const { q: empty } = await queueWith(0);
    const waiting = worker({ queueId: empty, waitMs: 20000, handler: async () => ({ outcome: "succeeded" }) }).start();
    await sleep(300);
    const t1 = Date.now();
    await waiting.stop({ deadlineMs: 5000 });
    assert.ok(Date.now() - t1 < 1000, `stop took ${Date.now() - t1} ms`);
    assert.deepEqual(await idle.stop(), { stopped: true }, "a worker never started stops at once");
  });

  it("aborts the signal of a handler still running at the deadline and sends nothing of it", async () => {
    const { q, ids } = await queueWith(1);
    let signal: AbortSignal | undefined;
    const w = worker({
      queueId: q,
      concurrency: 1,
      handler: async (_t, ctx) => {
        signal = ctx.signal;
        await sleep(1500);
        return { outcome: "succeeded" };
      },
    }).start();
    await until(() => signal !== undefined);
    const t0 = Date.now();
    await w.stop({ deadlineMs: 200 });
    assert.ok(Date.now() - t0 < 1000);
    assert.equal(signal!.aborted, true);
    await sleep(1700);
    assert.equal((await orbit.getTask(ids[0]!)).state, "RUNNING", "left to its lease");
  });

  it("refuses a bad option in the constructor", () => {
    const handler = async () => ({ outcome: "succeeded" as const });
    const queueId = "0".repeat(32);
    for (const concurrency of [0, 33, 1.5]) assert.throws(() => worker({ queueId, concurrency, handler }), RangeError);
    assert.throws(() => worker({ queueId: undefined as unknown as string, handler }), RangeError);
    assert.throws(() => worker({ queueId: "Q".repeat(32), handler }), RangeError);
    assert.throws(() => worker({ queueId, waitMs: 30001, handler }), RangeError);
    assert.throws(() => worker({ queueId, handler: undefined as unknown as WorkerOptions["handler"] }), TypeError);
  });

  it("ends on a claim no retry can mend (401, 404) instead of looping", async () => {
    const handler = async () => ({ outcome: "succeeded" as const });
    const stranger = worker({ queueId: "0".repeat(32), handler, token: `orbit_${"0".repeat(32)}_${"A".repeat(43)}` });
    const end = await stranger.start().done;
    assert.equal(!end.stopped && end.error.status, 401);
    const unknown = await worker({ queueId: "0".repeat(32), handler }).start().done;
    assert.equal(!unknown.stopped && unknown.error.code, "NOT_FOUND");
  });

  it("backs off and goes on while the node is unreachable", async () => {
    const errors: unknown[] = [];
    const w = new Worker({
      baseUrl: "http://127.0.0.1:1",
      token: cred.token,
      queueId: "0".repeat(32),
      backoff: { initialMs: 50, maxMs: 200 },
      onError: (e) => void errors.push(e),
      handler: async () => ({ outcome: "succeeded" }),
    }).start();
    // Each failed claim is the client's own retries (refused connections) and then the
    // worker's back-off: it keeps claiming, and reports every failure.
    await until(() => errors.length >= 3, 15000);
    assert.deepEqual(await w.stop({ deadlineMs: 1000 }), { stopped: true });
    assert.ok(errors.every((e) => e instanceof OrbitNetworkError));
  });

  describe("with a short worker lease", () => {
    let short: OrbitNode;
    before(async () => (short = await startNode(db.url, { ORBIT_WORKER_LEASE_MS: "1000" })));
    after(async () => void (await short?.stop()));

    it("reports a completion refused after the lease ran out, and does not retry it", async () => {
      const { q, ids } = await queueWith(1);
      const refused: RefusedCompletion[] = [];
      let calls = 0;
      const w = new Worker({
        baseUrl: short.url,
        token: cred.token,
        queueId: q,
        concurrency: 1,
        waitMs: 500,
        onRefused: (r) => void refused.push(r),
        handler: async () => {
          if (++calls === 1) await sleep(2200);
          return { outcome: "succeeded", result: calls };
        },
      }).start();
      await until(() => refused.length === 1);
      await until(async () => (await orbit.getTask(ids[0]!)).state === "SUCCEEDED");
      await w.stop();
      assert.equal(refused[0]!.code, "STATE_CONFLICT");
      assert.equal(refused[0]!.status, 409);
      assert.equal(refused[0]!.taskId, ids[0]);
      const t = await orbit.getTask(ids[0]!);
      assert.equal(t.attempts, 2, "the expired lease gave it back, a second claim completed it");
    });

    it("leaves the tasks of a killed worker process to their leases; another worker completes them", async () => {
      const { q, ids } = await queueWith(3);
      const sdk = path.resolve(process.cwd(), "dist/src/sdk/index.js");
      // A worker in a process of its own, whose handlers never end: killed mid-batch.
      const script = `
        const { Worker } = await import(${JSON.stringify(sdk)});
        new Worker({ baseUrl: process.env.URL, token: process.env.TOKEN, queueId: process.env.Q, concurrency: 3,
          handler: (task) => { console.log(task.id); return new Promise(() => {}); } }).start();`;
      const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
        env: { ...process.env, URL: short.url, TOKEN: cred.token, Q: q },
        stdio: ["ignore", "pipe", "inherit"],
      });
      let claimed = "";
      child.stdout.on("data", (d) => (claimed += d));
      const exited = new Promise((r) => child.on("exit", r));
      await until(() => claimed.trim().split("\n").length === 3);
      child.kill("SIGKILL");
      await exited;
      for (const id of ids) assert.equal((await orbit.getTask(id)).state, "RUNNING");
      const second = new Worker({
        baseUrl: short.url,
        token: cred.token,
        queueId: q,
        concurrency: 3,
        waitMs: 500,
        handler: async (task) => ({ outcome: "succeeded", result: task.attempts }),
      }).start();
      await until(async () =>
        (await Promise.all(ids.map((id) => orbit.getTask(id)))).every((t) => t.state === "SUCCEEDED"),
      );
      await second.stop();
      for (const id of ids) assert.equal((await orbit.getTask(id)).attempts, 2, "one attempt lost to the kill");
    });
  });
});

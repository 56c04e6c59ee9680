// Requests cost a node a small, bounded amount of work, with or without a valid token:
// each is answered by a real node. The node's own CPU time (read from /proc, so another
// process's load does not count) shows the work done, with a bound far above the linear
// cost and far below what a quadratic one would take; a proxy that holds the database's
// answers shows the pool's wait bounded and work not started past its deadline.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { freshDatabase, MYSQL_PORT, type TestDatabase } from "../helpers/db.js";
import { request } from "../helpers/http.js";
import { bootstrap, startNode, type OrbitNode } from "../helpers/orbit.js";
import { startProxy, type Proxy } from "../helpers/proxy.js";

/** CPU time the process has used, user and system, in ms (Linux clock ticks of 10 ms). */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

describe("cheap work for requests without a valid token", function () {
  this.timeout(120000);
  let db: TestDatabase;
  let node: OrbitNode;

  before(async () => {
    db = await freshDatabase("cheap_work");
    node = await startNode(db.url);
  });
  after(() => node?.stop());

  it("answers paths of long colon runs in linear time", async () => {
    const colons = ":".repeat(14000);
    const paths = [`/${colons}/x`, `/v1/${colons}/x`, `/v1/tasks/${colons}/x`, `/${"a:".repeat(7000)}/x`];
    // Warm up: the first requests of a process compile its code.
    for (const path of paths) assert.equal((await request(node.url, { path })).status, 404);
    const before = cpuMs(node.process.pid!);
    for (let i = 0; i < 10; i++) {
      for (const path of paths) {
        for (const method of ["GET", "POST", "DELETE"]) {
          const res = await request(node.url, { method, path });
          assert.equal(res.status, 404, `${method} ${path.slice(0, 20)}…`);
          assert.equal(res.json.error.code, "NOT_FOUND");
        }
      }
    }
    // 120 requests of 14 kB: a linear router spends well under a second on them all; the
    // quadratic pattern spent about 0.2 s on each.
    const spent = cpuMs(node.process.pid!) - before;
    assert.ok(spent < 3000, `the node spent ${spent} ms of CPU on 120 requests for unknown paths`);
  });
});

describe("the database pool's wait, bounded", function () {
  this.timeout(120000);
  let db: TestDatabase;
  let proxy: Proxy;
  let node: OrbitNode;
  let token: string;
  let queueId: string;

  before(async () => {
    db = await freshDatabase("pool_wait");
    const boot = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"] });
    token = boot.token;
    queueId = boot.queues[0]!.id;
    proxy = await startProxy(MYSQL_PORT);
    // One connection, so one held statement holds the pool; no background sweep meanwhile.
    node = await startNode(db.urlVia(proxy), {
      ORBIT_DB_POOL_SIZE: "1",
      ORBIT_REQUEST_TIMEOUT_MS: "3000",
      ORBIT_SEQUENCER_SWEEP_MS: "3600000",
    });
  });
  afterEach(() => proxy.release());
  after(async () => {
    await node?.stop();
    await proxy?.close();
  });

  it("refuses at once the requests beyond the pool's wait queue, in the envelope", async () => {
    proxy.hold();
    const started = Date.now();
    const answers = await Promise.all(
      Array.from({ length: 120 }, () =>
        request(node.url, { path: "/v1/health" }).then((r) => ({ ...r, after: Date.now() - started })),
      ),
    );
    // 1 connection and 64 waiters: the other 55 are refused before their deadline.
    const early = answers.filter((a) => a.after < 1500);
    assert.ok(early.length >= 45, `only ${early.length} refused at once`);
    for (const a of answers) {
      assert.equal(a.status, 503);
      assert.equal(a.json.error.code, "UNAVAILABLE");
      assert.equal(a.headers["retry-after"], "1");
    }
    proxy.release();
    // The waiters' own statements run first (a health check's bare SELECT has no deadline
    // check), then the node answers again.
    for (const end = Date.now() + 15000; (await request(node.url, { path: "/v1/health" })).status !== 200;) {
      assert.ok(Date.now() < end, "the node did not recover");
      await new Promise((r) => setTimeout(r, 100));
    }
  });

  it("writes nothing for requests whose deadline passed while they waited for a connection", async () => {
    const submitted = await request(node.url, {
      method: "POST",
      path: "/v1/tasks",
      token,
      headers: [["Idempotency-Key", "to-cancel"]],
      body: JSON.stringify({ queue_id: queueId, input: {} }),
    });
    assert.equal(submitted.status, 201);
    const cancel = (key: string) =>
      request(node.url, {
        method: "POST",
        path: `/v1/tasks/${submitted.json.data.task.id}:cancel`,
        token,
        headers: [["Idempotency-Key", key]],
        body: JSON.stringify({ expected_revision: "1", reason: "late" }),
      });
    proxy.hold();
    const late = await Promise.all(Array.from({ length: 6 }, (_, i) => cancel(`late-${i}`)));
    assert.deepEqual(
      late.map((r) => r.status),
      [503, 503, 503, 503, 503, 503],
    );
    // Every deadline has passed. When the database answers again, the requests that
    // waited for the connection past their deadlines get it in turn and write nothing.
    proxy.release();
    await new Promise((r) => setTimeout(r, 1000));
    const task = await db.query("SELECT state FROM tasks WHERE id = ?", [submitted.json.data.task.id]);
    assert.equal(task[0].state, "QUEUED");
    const keys = await db.query("SELECT idem_key FROM idempotency_keys WHERE idem_key LIKE 'late-%'");
    assert.deepEqual(keys, []);
  });
});

describe("lock waits and statements within the request deadline", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let node: OrbitNode;

  before(async () => {
    db = await freshDatabase("lock_limits");
    node = await startNode(db.url, { ORBIT_REQUEST_TIMEOUT_MS: "2000" });
  });
  after(() => node?.stop());

  it("ends a lock wait of a request that outlived its deadline instead of holding the connection for InnoDB's 50 s", async () => {
    const boot = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"] });
    const submitted = await request(node.url, {
      method: "POST",
      path: "/v1/tasks",
      token: boot.token,
      headers: [["Idempotency-Key", "locked"]],
      body: JSON.stringify({ queue_id: boot.queues[0]!.id, input: {} }),
    });
    assert.equal(submitted.status, 201);
    const taskId = submitted.json.data.task.id as string;
    const holder = await db.connect();
    const watcher = await db.connect();
    try {
      const [[held]] = (await holder.query("SELECT CONNECTION_ID() AS id")) as unknown as [{ id: number }[]];
      await holder.query("START TRANSACTION");
      await holder.query("SELECT id FROM tasks WHERE id = ? FOR UPDATE", [taskId]);
      /** Statements of the node running now (the holder idles in its transaction). */
      const running = async (): Promise<number> => {
        const [rows] = (await watcher.query(
          "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE DB = ? AND COMMAND = 'Query' AND ID NOT IN (CONNECTION_ID(), ?)",
          [db.name, held!.id],
        )) as unknown as [{ n: number }[]];
        return Number(rows[0]!.n);
      };
      const cancel = request(node.url, {
        method: "POST",
        path: `/v1/tasks/${taskId}:cancel`,
        token: boot.token,
        headers: [["Idempotency-Key", "cancel-locked"]],
        body: JSON.stringify({ expected_revision: "1", reason: "locked" }),
      });
      for (const end = Date.now() + 2000; (await running()) === 0;) {
        assert.ok(Date.now() < end, "the cancel never waited for the row");
        await new Promise((r) => setTimeout(r, 20));
      }
      const answered = await cancel;
      assert.equal(answered.status, 503, answered.text);
      // The node's statement waiting for the row ends within its lock wait limit (the
      // deadline, 2 s), not InnoDB's 50 s, while the lock is still held.
      for (const end = Date.now() + 6000; (await running()) > 0;) {
        assert.ok(Date.now() < end, "the node's statement still waits for the lock");
        await new Promise((r) => setTimeout(r, 100));
      }
      await holder.query("ROLLBACK");
      const task = await db.query("SELECT state FROM tasks WHERE id = ?", [taskId]);
      assert.equal(task[0].state, "QUEUED");
    } finally {
      await holder.end();
      await watcher.end();
    }
  });
});

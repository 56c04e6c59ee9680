// The result log under concurrency: many producers on two `orbit serve` nodes
// append while a reader keeps reading the committed head and every event up to it. The
// reader must never see a missing sequence below the head, and the final log must hold
// exactly one event per transition, numbered 1..N. Then retention: purge by sequence
// and by age.
import { strict as assert } from "node:assert";
import mysql from "mysql2/promise";
import { freshDatabase, MYSQL_PORT, type TestDatabase } from "../helpers/db.js";
import { startProxy } from "../helpers/proxy.js";
import { bootstrap, runCli, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, readLog, waitSequenced, type Client } from "../helpers/api.js";
import { createPool } from "../../src/db/pool.js";
import { purgeOlderThan } from "../../src/domain/result-log.js";
import * as frames from "../../generated/ws/validators.js";

const validResultEvent = (frames as unknown as Record<string, ((d: unknown) => boolean) & { errors?: unknown }>)
  .ResultEvent!;
/** The snapshot's fields (docs/protocol.md §6): a result and the attempt are optional. */
const SNAPSHOT_FIELDS = [
  "schema_version",
  "task_id",
  "queue_id",
  "state",
  "revision",
  "effect_uncertain",
  "result",
  "current_attempt_id",
];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const PRODUCERS = 8;
const TASKS_PER_PRODUCER = 20;
/**
 * In the content of every request of the producers that the log must not show
 * (docs/tasks.md: details carries {state, reason} and never task input): the input, a
 * worker's error, the free-text reasons of requeue, cancel and resolve.
 */
const REQUEST_TEXT = "request-text-the-log-never-shows";

describe("result log", function () {
  this.timeout(120000);
  let db: TestDatabase;
  let nodes: OrbitNode[];
  let cred: BootstrapOutput;
  let elsewhere: BootstrapOutput; // another namespace: another stream

  before(async () => {
    db = await freshDatabase("result_log");
    const queues = Array.from({ length: PRODUCERS }, (_, i) => `p${i}`);
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues });
    elsewhere = await bootstrap(db.url, { namespace: "ns2", application: "app", queues: ["p0"] });
    nodes = await Promise.all([startNode(db.url), startNode(db.url)]);
  });
  after(async () => {
    await Promise.all((nodes ?? []).map((n) => n.stop()));
    await db?.drop();
  });

  /** One producer: its own queue, a mix of every transition; returns how many events it caused. */
  async function produce(api: Client, queueId: string, seed: number): Promise<number> {
    let events = 0;
    const post = async (path: string, body: unknown, key?: string | null) => {
      const res = await api.post(path, body, key);
      assert.equal(res.status < 300, true, `${path}: ${res.text}`);
      return res.json?.data;
    };
    for (let i = 0; i < TASKS_PER_PRODUCER; i++) {
      const task = (await post("/v1/tasks", { queue_id: queueId, input: { i, note: REQUEST_TEXT } })).task;
      switch ((seed + i) % 5) {
        case 0: // cancel while QUEUED
          await post(`/v1/tasks/${task.id}:cancel`, { expected_revision: task.revision, reason: REQUEST_TEXT });
          events += 1;
          break;
        case 1: {
          // requeue, then complete
          const a = await post("/v1/worker/claim", { queue_id: queueId }, null);
          await post(`/v1/worker/attempts/${a.attempt_id}:requeue`, { reason: REQUEST_TEXT }, null);
          const b = await post("/v1/worker/claim", { queue_id: queueId }, null);
          await post(`/v1/worker/attempts/${b.attempt_id}:complete`, { outcome: "succeeded", result: i }, null);
          events += 2;
          break;
        }
        case 2: {
          // cancel while RUNNING
          const a = await post("/v1/worker/claim", { queue_id: queueId }, null);
          await post(`/v1/tasks/${task.id}:cancel`, { expected_revision: a.task.revision, reason: REQUEST_TEXT });
          events += 1;
          break;
        }
        case 3: {
          // needs review, then resolved
          const a = await post("/v1/worker/claim", { queue_id: queueId }, null);
          const done = await post(`/v1/worker/attempts/${a.attempt_id}:complete`, { outcome: "needs_review" }, null);
          await post(`/v1/tasks/${task.id}:resolve`, {
            expected_revision: done.task.revision,
            outcome: "failed",
            reason: REQUEST_TEXT,
          });
          events += 2;
          break;
        }
        default: {
          const a = await post("/v1/worker/claim", { queue_id: queueId }, null);
          await post(`/v1/worker/attempts/${a.attempt_id}:complete`, { outcome: "failed", error: REQUEST_TEXT }, null);
          events += 1;
        }
      }
    }
    return events;
  }

  it("never shows a reader a gap below the head; ends with one event per transition, 1..N", async () => {
    let producing = true;
    let reads = 0;
    const reader = (async () => {
      const conn = await mysql.createConnection({ uri: db.url, supportBigNumbers: true, bigNumberStrings: true });
      try {
        while (producing) {
          const [s] = await conn.query<any[]>("SELECT head_sequence FROM namespace_streams WHERE namespace_id = ?", [
            cred.namespace_id,
          ]);
          const head = Number(s[0].head_sequence);
          const [rows] = await conn.query<any[]>(
            "SELECT sequence FROM result_events WHERE namespace_id = ? AND sequence <= ? ORDER BY sequence",
            [cred.namespace_id, head],
          );
          const seqs = rows.map((r) => Number(r.sequence));
          assert.equal(seqs.length, head, `at head ${head} the reader saw ${seqs.length} events`);
          seqs.forEach((s2, i) => assert.equal(s2, i + 1, "sequences are 1..head with no gap"));
          reads++;
        }
      } finally {
        await conn.end();
      }
    })();
    // docs/tasks.md: each namespace has one stream. Another namespace's events, committed
    // meanwhile, are numbered in its own stream, never in this one.
    const otherCount = produce(client(nodes[1]!.url, elsewhere.token), elsewhere.queues[0]!.id, 0);
    const counts = await Promise.all(
      cred.queues.map((q, i) => produce(client(nodes[i % 2]!.url, cred.token), q.id, i)),
    );
    producing = false;
    await reader;
    const expected = counts.reduce((a, b) => a + b, 0);
    await waitSequenced(db, cred.namespace_id);
    const { head, events } = await readLog(db, cred.namespace_id);
    assert.ok(reads > 10, `the reader read ${reads} times while producers ran`);
    assert.equal(Number(head), expected, "the head counts every transition");
    assert.deepEqual(
      events.map((e) => Number(e.sequence)),
      Array.from({ length: expected }, (_, i) => i + 1),
    );
    assert.equal(new Set(events.map((e) => e.id)).size, expected, "event ids are unique");
    // Per task, events come in the order of its revisions.
    const byTask = new Map<string, bigint[]>();
    for (const e of events)
      byTask.set(e.aggregate_id, [...(byTask.get(e.aggregate_id) ?? []), BigInt(e.aggregate_revision)]);
    for (const revs of byTask.values()) for (let i = 1; i < revs.length; i++) assert.ok(revs[i]! > revs[i - 1]!);
    assert.equal(byTask.size, PRODUCERS * TASKS_PER_PRODUCER);
    const expectedElsewhere = await otherCount;
    await waitSequenced(db, elsewhere.namespace_id);
    const other = await readLog(db, elsewhere.namespace_id);
    assert.equal(Number(other.head), expectedElsewhere);
    assert.deepEqual(
      other.events.map((e) => Number(e.sequence)),
      Array.from({ length: expectedElsewhere }, (_, i) => i + 1),
    );
  });

  it("prints committed events with orbit events, in the event shape of docs/protocol.md §6", async () => {
    const env = { ORBIT_DATABASE_URL: db.url };
    const res = await runCli(["events", "--namespace", "ns", "--after", "2", "--limit", "5"], env);
    assert.equal(res.code, 0, res.stderr);
    const lines = res.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    assert.deepEqual(
      lines.map((e) => e.sequence),
      ["3", "4", "5", "6", "7"],
    );
    for (const e of lines) {
      assert.deepEqual(Object.keys(e).sort(), [
        "aggregate_id",
        "aggregate_kind",
        "aggregate_revision",
        "details",
        "id",
        "occurred_at",
        "sequence",
        "snapshot",
        "type",
      ]);
      assert.equal(e.snapshot.schema_version, 1);
    }
    for (const bad of [
      ["--after", "01"],
      ["--limit", "0"],
      ["--limit", "10001"],
    ]) {
      assert.equal((await runCli(["events", "--namespace", "ns", ...bad], env)).code, 2, bad.join(" "));
    }
    // docs/operations.md: --after defaults to 0 and --limit to 100, and the head and the retention
    // boundary go to stderr, so stdout stays pure JSON lines. The log holds more than 100.
    const { head, events } = await readLog(db, cred.namespace_id);
    assert.ok(events.length > 100, `${events.length} events`);
    const sequences = (stdout: string) =>
      stdout
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l).sequence as string);
    const first = await runCli(["events", "--namespace", "ns"], env);
    assert.equal(first.code, 0, first.stderr);
    assert.deepEqual(
      sequences(first.stdout),
      events.slice(0, 100).map((e) => e.sequence),
    );
    assert.equal(first.stderr, `head ${head}, retained after 0\n`);
    // --limit 10000 is the largest allowed, and a limit above 100 is honoured: the whole
    // log, oldest first, task.requeued included (subscriptions never deliver those).
    const all = await runCli(["events", "--namespace", "ns", "--limit", "10000"], env);
    assert.equal(all.code, 0, all.stderr);
    assert.deepEqual(
      sequences(all.stdout),
      events.map((e) => e.sequence),
    );
    assert.ok(all.stdout.includes(`"type":"task.requeued"`));
  });

  it("prints with orbit events no request content: details is {state, reason}, the snapshot only its listed fields", async () => {
    // docs/tasks.md: details carries {state, reason} and never task input; the worker's
    // error is kept with the attempt and shown by no read (openapi.yaml). task.requeued is
    // only here (no subscription receives it), so no frame or response validator sees it.
    const res = await runCli(["events", "--namespace", "ns", "--limit", "10000"], { ORBIT_DATABASE_URL: db.url });
    assert.equal(res.code, 0, res.stderr);
    assert.ok(!res.stdout.includes(REQUEST_TEXT), "a request's input, error or reason is in the log");
    const lines = res.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    const types = new Set(lines.map((e) => e.type));
    for (const t of ["task.requeued", "task.succeeded", "task.failed", "task.cancelled", "task.needs_review"])
      assert.ok(types.has(t), t);
    assert.ok(
      lines.some((e) => e.snapshot.result !== undefined),
      "some event carries a worker's result",
    );
    for (const e of lines) {
      assert.deepEqual(Object.keys(e.details).sort(), ["reason", "state"], JSON.stringify(e));
      assert.equal(e.details.state, e.snapshot.state);
      const extra = Object.keys(e.snapshot).filter((k) => !SNAPSHOT_FIELDS.includes(k));
      assert.deepEqual(extra, [], JSON.stringify(e));
      // The result types are exactly the contract's event (the requeue's state is no result's).
      if (e.type !== "task.requeued")
        assert.ok(validResultEvent(e), `${JSON.stringify(validResultEvent.errors)}\n${JSON.stringify(e)}`);
    }
  });

  it("purges by sequence: deletes below --before and raises the boundary durably", async () => {
    const env = { ORBIT_DATABASE_URL: db.url };
    const { head } = await readLog(db, cred.namespace_id);
    for (const bad of [
      ["--before", "05"],
      ["--before", (head + 2n).toString()],
      ["--before", "-1"],
      ["--before", "0"],
    ]) {
      const res = await runCli(["purge", "--namespace", "ns", ...bad], env);
      assert.equal(res.code, 2, `${bad.join(" ")}: ${res.stderr}`);
    }
    assert.equal((await runCli(["purge", "--namespace", "nope", "--before", "3"], env)).code, 2);
    // An unknown name is echoed JSON-escaped: raw, an ESC sequence would reach the terminal.
    for (const cmd of [["purge", "--before", "3"], ["events"]]) {
      const res = await runCli([...cmd, "--namespace", "a\u001b[31m\nX"], env);
      assert.equal(res.code, 2, res.stderr);
      assert.ok(res.stderr.includes(`no namespace named "a\\u001b[31m\\nX"`), JSON.stringify(res.stderr));
    }
    assert.equal((await readLog(db, cred.namespace_id)).events[0]!.sequence, "1", "nothing purged by bad calls");
    const res = await runCli(["purge", "--namespace", "ns", "--before", "11"], env);
    assert.equal(res.code, 0, res.stderr);
    assert.match(res.stdout, /purged 10 events/);
    const after = await readLog(db, cred.namespace_id);
    assert.equal(after.events[0]!.sequence, "11");
    assert.equal(after.head, head, "the head does not move");
    const c = await db.connect();
    try {
      const [rows] = await c.query<any[]>("SELECT retention_boundary FROM namespace_streams WHERE namespace_id = ?", [
        cred.namespace_id,
      ]);
      assert.equal(String(rows[0].retention_boundary), "10");
    } finally {
      await c.end();
    }
    // A lower --before never lowers the boundary, and says where the retained log starts:
    // not "starts after 4", a boundary the namespace does not have.
    const lower = await runCli(["purge", "--namespace", "ns", "--before", "5"], env);
    assert.equal(lower.code, 0, lower.stderr);
    assert.match(lower.stdout, /purged 0 events; the retained log of ns starts after 10\n$/);
    assert.equal((await readLog(db, cred.namespace_id)).events[0]!.sequence, "11");
    // ... and the namespace keeps that boundary, as orbit events reports it: a boundary
    // lowered to 4 would let a new subscription ask for history that is gone.
    const view = await runCli(["events", "--namespace", "ns", "--limit", "1"], env);
    assert.equal(view.code, 0, view.stderr);
    assert.equal(view.stderr, `head ${head}, retained after 10\n`);
  });

  it("purges the whole log with --before head + 1, the largest allowed", async () => {
    // docs/operations.md: SEQUENCE <= head + 1. head + 1 is how an operator empties a namespace's log.
    const env = { ORBIT_DATABASE_URL: db.url };
    const { head } = await readLog(db, elsewhere.namespace_id);
    assert.ok(head > 0n);
    const above = await runCli(["purge", "--namespace", "ns2", "--before", (head + 2n).toString()], env);
    assert.equal(above.code, 2, above.stderr);
    assert.match(above.stderr, new RegExp(`--before must be at most head \\+ 1 \\(${head + 1n}\\)`));
    const res = await runCli(["purge", "--namespace", "ns2", "--before", (head + 1n).toString()], env);
    assert.equal(res.code, 0, res.stderr);
    assert.equal(res.stdout, `purged ${head} events; the retained log of ns2 starts after ${head}\n`);
    const view = await runCli(["events", "--namespace", "ns2"], env);
    assert.equal(view.code, 0, view.stderr);
    assert.equal(view.stdout, "");
    assert.equal(view.stderr, `head ${head}, retained after ${head}\n`);
  });

  it("purges a log longer than one delete batch (1,000 rows) whole, and counts every row", async () => {
    // The rows go in batches of 1,000 after the boundary is raised: the count printed is
    // what the operator relies on, and every batch must run, not just the first.
    const env = { ORBIT_DATABASE_URL: db.url };
    const big = await bootstrap(db.url, { namespace: "ns3", application: "app", queues: ["q"] });
    const n = 1100;
    const c = await db.connect();
    try {
      // A numbered log as the sequencer leaves it: sequences 1..n and the head at n.
      const rows = Array.from({ length: n }, (_, i) => [
        `c${i.toString(16).padStart(31, "0")}`,
        big.namespace_id,
        big.queues[0]!.id,
        i + 1,
        "task.cancelled",
        `d${i.toString(16).padStart(31, "0")}`,
        2,
        new Date(),
        '{"state":"CANCELLED","reason":"CANCEL_REQUESTED"}',
        "{}",
      ]);
      await c.query(
        "INSERT INTO result_events (id, namespace_id, queue_id, sequence, type, aggregate_id, aggregate_revision, occurred_at, details, snapshot) VALUES ?",
        [rows],
      );
      await c.query("UPDATE namespace_streams SET head_sequence = ? WHERE namespace_id = ?", [n, big.namespace_id]);
    } finally {
      await c.end();
    }
    const res = await runCli(["purge", "--namespace", "ns3", "--before", String(n + 1)], env);
    assert.equal(res.code, 0, res.stderr);
    assert.equal(res.stdout, `purged ${n} events; the retained log of ns3 starts after ${n}\n`);
    assert.deepEqual((await readLog(db, big.namespace_id)).events, []);
  });

  it("purges by age (ORBIT_RETENTION) everything that occurred before the cutoff", async () => {
    const pool = createPool(db.url, 2);
    try {
      const { events } = await readLog(db, cred.namespace_id);
      const c = await db.connect();
      try {
        // Age the first five retained events by an hour.
        await c.query(
          "UPDATE result_events SET occurred_at = occurred_at - INTERVAL 1 HOUR WHERE namespace_id = ? AND sequence <= ?",
          [cred.namespace_id, events[4]!.sequence],
        );
      } finally {
        await c.end();
      }
      const deleted = await purgeOlderThan(pool, cred.namespace_id, 30 * 60 * 1000);
      assert.equal(deleted, 5);
      assert.equal((await readLog(db, cred.namespace_id)).events[0]!.sequence, events[5]!.sequence);
      assert.equal(await purgeOlderThan(pool, cred.namespace_id, 30 * 60 * 1000), 0, "nothing more is old enough");
    } finally {
      await pool.end();
    }
  });

  it("deletes on its next sweep (ORBIT_RETENTION) the events a purge left below the boundary", async () => {
    // A purge raises the boundary in one transaction and deletes afterwards: a node killed
    // in between leaves the rows. The sweep, finding the boundary already in place, must
    // still delete them, or they would stay until the boundary next moves.
    const pool = createPool(db.url, 2);
    const c = await db.connect();
    try {
      const { events } = await readLog(db, cred.namespace_id);
      assert.ok(events.length >= 4);
      await c.query("UPDATE namespace_streams SET retention_boundary = ? WHERE namespace_id = ?", [
        events[2]!.sequence,
        cred.namespace_id,
      ]);
      // Nothing is old enough to raise the boundary; the three rows at or below it go.
      assert.equal(await purgeOlderThan(pool, cred.namespace_id, 30 * 60 * 1000), 3);
      assert.equal((await readLog(db, cred.namespace_id)).events[0]!.sequence, events[3]!.sequence);
      const [s] = await c.query<any[]>("SELECT retention_boundary FROM namespace_streams WHERE namespace_id = ?", [
        cred.namespace_id,
      ]);
      assert.equal(String(s[0].retention_boundary), events[2]!.sequence, "the boundary is not moved");
      assert.equal(await purgeOlderThan(pool, cred.namespace_id, 30 * 60 * 1000), 0);
    } finally {
      await c.end();
      await pool.end();
    }
  });

  it("numbers an event whose node died between its commit and its numbering (the sweep)", async () => {
    const before = await readLog(db, cred.namespace_id);
    const c = await db.connect();
    try {
      // Exactly what such a node leaves behind: a committed event with no sequence.
      await c.query(
        `INSERT INTO result_events (id, namespace_id, queue_id, sequence, type, aggregate_id, aggregate_revision, occurred_at, details, snapshot)
         VALUES (?, ?, ?, NULL, 'task.cancelled', ?, 2, UTC_TIMESTAMP(3), '{"state":"CANCELLED","reason":"CANCEL_REQUESTED"}', '{}')`,
        ["f".repeat(32), cred.namespace_id, cred.queues[0]!.id, "e".repeat(32)],
      );
    } finally {
      await c.end();
    }
    await waitSequenced(db, cred.namespace_id, 15000);
    const after = await readLog(db, cred.namespace_id);
    assert.equal(after.head, before.head + 1n);
    assert.equal(after.events.at(-1)!.id, "f".repeat(32));
  });
});

describe("result log numbering under a busy node", function () {
  this.timeout(60000);

  it("numbers events while every connection of the node's main pool is held by a waiting request", async () => {
    // A database of its own: another node's sweep would number the event too.
    const db = await freshDatabase("result_log_busy");
    const other = await bootstrap(db.url, { namespace: "ns-busy", application: "app", queues: ["q"] });
    const node = await startNode(db.url, { ORBIT_DB_POOL_SIZE: "1", ORBIT_REQUEST_TIMEOUT_MS: "30000" });
    const api = client(node.url, other.token);
    const holder = await db.connect();
    const c = await db.connect();
    try {
      const task = (await api.post("/v1/tasks", { queue_id: other.queues[0]!.id, input: 1 })).json.data.task;
      // The node's only main-pool connection waits on this row lock inside a cancel.
      await holder.query("START TRANSACTION");
      await holder.query("SELECT id FROM tasks WHERE id = ? FOR UPDATE", [task.id]);
      const cancel = api.post(`/v1/tasks/${task.id}:cancel`, { expected_revision: task.revision, reason: "r" });
      await new Promise((r) => setTimeout(r, 500));
      // A committed, unnumbered event (what a node that died after its commit leaves).
      await c.query(
        `INSERT INTO result_events (id, namespace_id, queue_id, sequence, type, aggregate_id, aggregate_revision, occurred_at, details, snapshot)
         VALUES (?, ?, ?, NULL, 'task.cancelled', ?, 2, UTC_TIMESTAMP(3), '{"state":"CANCELLED","reason":"CANCEL_REQUESTED"}', '{}')`,
        ["d".repeat(32), other.namespace_id, other.queues[0]!.id, "c".repeat(32)],
      );
      // The sweep (every 5 s) numbers it on the sequencer's own connections.
      const numbered = async () => {
        const [rows] = await c.query<any[]>("SELECT sequence FROM result_events WHERE id = ?", ["d".repeat(32)]);
        return rows[0]?.sequence !== null;
      };
      const deadline = Date.now() + 12_000;
      while (!(await numbered()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
      assert.ok(await numbered(), "numbered while the main pool was busy");
      await holder.query("ROLLBACK");
      assert.equal((await cancel).status, 200, "the waiting request completes afterwards");
    } finally {
      await holder.end();
      await c.end();
      await node.stop();
      await db.drop();
    }
  });
});

describe("result log numbering after a lost sequencer reply", function () {
  this.timeout(60000);

  it("numbers at once the events committed during a pass whose COMMIT reply was lost", async () => {
    // A database of its own and one node behind a proxy: no other node's sweep numbers
    // anything here.
    const db = await freshDatabase("result_log_lost_reply");
    const cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"] });
    const proxy = await startProxy(MYSQL_PORT);
    const node = await startNode(db.urlVia(proxy));
    try {
      const api = client(node.url, cred.token);
      const q = cred.queues[0]!.id;
      const [t1, t2] = [
        (await api.post("/v1/tasks", { queue_id: q, input: 1 })).json.data.task,
        (await api.post("/v1/tasks", { queue_id: q, input: 2 })).json.data.task,
      ];
      const cancel = async (t: { id: string }) =>
        assert.equal((await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" })).status, 200);
      // The sequencer's pass for t1's event: its numbers and COMMIT run, the reply is held.
      proxy.stallWhen("UPDATE namespace_streams SET head_sequence");
      await cancel(t1);
      for (const end = Date.now() + 10000; !proxy.stalled; await sleep(10))
        assert.ok(Date.now() < end, "the sequencer's COMMIT");
      // t2's event commits meanwhile: its kick is folded into the pass in flight.
      await cancel(t2);
      // The reply is lost with the connection: the pass fails after its COMMIT. The next
      // sweep statement stalls, so that only the sequencer's own retry can number t2's
      // event (without it, nothing would until the 5 s sweep, here never).
      proxy.cutStalled();
      proxy.stallWhen("SELECT DISTINCT namespace_id FROM result_events WHERE sequence IS NULL");
      const started = Date.now();
      for (;;) {
        const log = await readLog(db, cred.namespace_id);
        if (log.head === 2n) {
          assert.deepEqual(
            log.events.map((e) => e.aggregate_id),
            [t1.id, t2.id],
          );
          break;
        }
        assert.ok(Date.now() - started < 2000, `t2's event numbered within 2 s (head ${log.head})`);
        await sleep(20);
      }
    } finally {
      proxy.release();
      await node.stop();
      await proxy.close();
      await db.drop();
    }
  });
});

describe("result log numbering past an open insert", function () {
  this.timeout(60000);

  it("numbers committed events while an earlier insert is still open, and the open one after it commits, in ticket order", async () => {
    // A database of its own: the only producers are this test's.
    const db = await freshDatabase("result_log_open_insert");
    const cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"] });
    const node = await startNode(db.url);
    const open = await db.connect();
    try {
      const api = client(node.url, cred.token);
      const q = cred.queues[0]!.id;
      const cancel = async () => {
        const task = (await api.post("/v1/tasks", { queue_id: q, input: 1 })).json.data.task;
        assert.equal(
          (await api.post(`/v1/tasks/${task.id}:cancel`, { expected_revision: task.revision, reason: "r" })).status,
          200,
        );
        return task.id as string;
      };
      const waitHead = async (head: bigint) => {
        for (const end = Date.now() + 10000; ; await sleep(50)) {
          const log = await readLog(db, cred.namespace_id);
          if (log.head === head) return log;
          assert.ok(Date.now() < end, `head ${head} within 10 s (is ${log.head})`);
        }
      };
      // An event inserted first (the lower ticket) by a transaction that stays open.
      await open.query("START TRANSACTION");
      await open.query(
        `INSERT INTO result_events (id, namespace_id, queue_id, sequence, type, aggregate_id, aggregate_revision, occurred_at, details, snapshot)
         VALUES (?, ?, ?, NULL, 'task.cancelled', ?, 2, UTC_TIMESTAMP(3), '{"state":"CANCELLED","reason":"CANCEL_REQUESTED"}', '{}')`,
        ["a".repeat(32), cred.namespace_id, q, "b".repeat(32)],
      );
      const first = await cancel();
      const one = await waitHead(1n);
      assert.deepEqual(
        one.events.map((e) => e.aggregate_id),
        [first],
        "the committed event is numbered 1, past the open one",
      );
      const [mine] = await open.query<any[]>("SELECT sequence FROM result_events WHERE id = ?", ["a".repeat(32)]);
      assert.equal(mine[0].sequence, null, "the open insert is not numbered");
      await open.query("COMMIT");
      const second = await cancel();
      const three = await waitHead(3n);
      assert.deepEqual(
        three.events.map((e) => e.aggregate_id),
        [first, "b".repeat(32), second],
        "the rest in ticket order",
      );
    } finally {
      await open.end();
      await node.stop();
      await db.drop();
    }
  });
});

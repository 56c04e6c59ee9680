// Bounded storage (domain/housekeeping.ts): idempotency receipts, audit records and event
// sessions (closed, or never closed: their node died) past their retention are deleted, in
// batches, and nothing younger or still needed is; a node sweeps at start. Rows are aged in the real database by hand.
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import { createPool, type Pool } from "../../src/db/pool.js";
import { HOUSEKEEPING_BATCH, sweepExpired } from "../../src/domain/housekeeping.js";
import { newRowId } from "../../src/wire/ids.js";
import { client, waitSequenced } from "../helpers/api.js";
import { connect } from "../helpers/ws.js";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, runCli, startNode } from "../helpers/orbit.js";

const DAY = 86_400_000;
const hex = (n: number) => randomBytes(n).toString("hex");

describe("housekeeping: receipts, audit records and event sessions expire", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let pool: Pool;
  const now = Date.now();

  before(async () => {
    db = await freshDatabase("housekeeping");
    const migrated = await runCli(["migrate"], { ORBIT_DATABASE_URL: db.url });
    assert.equal(migrated.code, 0, migrated.stderr);
    pool = createPool(db.url, 2);
  });
  after(async () => {
    await pool?.end();
  });

  const count = async (table: string) => Number((await db.query(`SELECT COUNT(*) AS n FROM ${table}`))[0].n);

  const receipt = (ageMs: number) =>
    db.query(
      "INSERT INTO idempotency_keys (credential_id, operation, idem_key, request_digest, response_status, response_data, created_at) VALUES (?, 'tasks.submit', ?, ?, 201, '{}', ?)",
      [hex(16), hex(8), randomBytes(32), new Date(now - ageMs)],
    );
  const audit = (ageMs: number) =>
    db.query(
      "INSERT INTO audit_records (id, namespace_id, credential_id, subscription_id, action, details, revision_before, revision_after, created_at) VALUES (?, ?, ?, ?, 'test', '{}', 1, 2, ?)",
      [newRowId(now - ageMs), hex(16), hex(16), hex(16), new Date(now - ageMs)],
    );
  const session = (ageMs: number, closed: boolean, subscriptionId = hex(16)) => {
    const id = newRowId(now - ageMs);
    return db
      .query(
        "INSERT INTO event_sessions (id, subscription_id, credential_id, capacity, node_id, opened_at, closed_at) VALUES (?, ?, ?, 1, ?, ?, ?)",
        [id, subscriptionId, hex(16), hex(16), new Date(now - ageMs), closed ? new Date(now - ageMs + 1000) : null],
      )
      .then(() => id);
  };

  it("deletes each kind past its own retention, in batches, and keeps the younger", async () => {
    const old = HOUSEKEEPING_BATCH + 7; // more than one batch
    for (let i = 0; i < old; i++) await receipt(8 * DAY);
    for (let i = 0; i < 3; i++) await receipt(6 * DAY);
    for (let i = 0; i < 4; i++) await audit(400 * DAY);
    for (let i = 0; i < 2; i++) await audit(300 * DAY);
    for (let i = 0; i < 3; i++) await session(8 * DAY, true);
    await session(8 * DAY, false); // never closed: its node died
    await session(1 * DAY, true); // closed, young: kept
    const open = await session(1 * DAY, false); // open, young: kept

    const retention = { receiptMs: 7 * DAY, auditMs: 365 * DAY, sessionMs: 7 * DAY, taskMs: 30 * DAY };
    assert.deepEqual(await sweepExpired(pool, retention, now), {
      receipts: old,
      audits: 4,
      sessions: 4,
      tasks: 0,
      failed: [],
    });
    assert.equal(await count("idempotency_keys"), 3);
    assert.equal(await count("audit_records"), 2);
    assert.equal(await count("event_sessions"), 2);
    assert.equal(Number((await db.query("SELECT COUNT(*) AS n FROM event_sessions WHERE id = ?", [open]))[0].n), 1);
    // A second sweep finds nothing more.
    assert.deepEqual(await sweepExpired(pool, retention, now), {
      receipts: 0,
      audits: 0,
      sessions: 0,
      tasks: 0,
      failed: [],
    });
  });

  it("keeps a closed or never-closed session that a LEASED delivery still names", async () => {
    await db.query("DELETE FROM event_sessions");
    const sub = hex(16);
    const holding = await session(10 * DAY, true, sub);
    const free = await session(10 * DAY, true, sub);
    const unclosedHolding = await session(10 * DAY, false, sub);
    // A lease of the closed session, not recovered yet (its subscription is made up: no
    // foreign key check for this one row).
    const c = await db.connect();
    try {
      await c.query("SET SESSION foreign_key_checks = 0");
      await c.query(
        `INSERT INTO deliveries (id, subscription_id, event_id, sequence, revision, state, created_at, available_at,
                                 lease_epoch, lease_until, session_id, attempts, attempt_budget)
         VALUES (?, ?, ?, 1, 2, 'LEASED', ?, ?, 1, ?, ?, 1, 20), (?, ?, ?, 2, 2, 'LEASED', ?, ?, 1, ?, ?, 1, 20)`,
        [
          ...[newRowId(), sub, hex(16), new Date(now), new Date(now), new Date(now + 60_000), holding],
          ...[newRowId(), sub, hex(16), new Date(now), new Date(now), new Date(now + 60_000), unclosedHolding],
        ],
      );
    } finally {
      await c.end();
    }
    const r = await sweepExpired(
      pool,
      { receiptMs: 7 * DAY, auditMs: 365 * DAY, sessionMs: 7 * DAY, taskMs: 30 * DAY },
      now,
    );
    assert.equal(r.sessions, 1);
    const left = (await db.query("SELECT id FROM event_sessions ORDER BY id")).map((s: { id: string }) => s.id);
    assert.deepEqual(left, [holding, unclosedHolding].sort());
    assert.ok(!left.includes(free));
  });

  it("sweeps when a node starts, with the retention it is given, and logs what it deleted", async () => {
    await db.query("DELETE FROM idempotency_keys");
    for (let i = 0; i < 5; i++) await receipt(3 * 3_600_000); // 3 hours old
    await receipt(60_000); // a minute old
    const node = await startNode(db.url, { ORBIT_RECEIPT_RETENTION: "2h" });
    try {
      for (const end = Date.now() + 15000; (await count("idempotency_keys")) !== 1;) {
        assert.ok(Date.now() < end, "the start-up sweep did not delete the old receipts");
        await new Promise((r) => setTimeout(r, 100));
      }
      for (const end = Date.now() + 5000; !node.lines.some((l) => l.includes('"msg":"housekeeping"'));) {
        assert.ok(Date.now() < end, "no housekeeping log line");
        await new Promise((r) => setTimeout(r, 50));
      }
      const line = JSON.parse(node.lines.find((l) => l.includes('"msg":"housekeeping"'))!) as Record<string, unknown>;
      assert.equal(line.receipts, 5);
      // The node still serves, and a new key is kept.
      const boot = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"] });
      const res = await client(node.url, boot.token).post("/v1/tasks", { queue_id: boot.queues[0]!.id, input: 1 });
      assert.equal(res.status, 201);
    } finally {
      await node.stop();
    }
  });

  it("deletes a finished task and its attempts only once nothing needs it", async () => {
    const node = await startNode(db.url);
    const boot = await bootstrap(db.url, { namespace: "tasks", application: "app", queues: ["q"], eventAccess: true });
    const api = client(node.url, boot.token);
    const q = boot.queues[0]!.id;
    const run = async (input: string): Promise<string> => {
      const t = (await api.post("/v1/tasks", { queue_id: q, input })).json.data.task.id as string;
      const claim = await api.post("/v1/worker/claim", { queue_id: q }, null);
      assert.equal(claim.json.data.task.id, t);
      const done = await api.post(
        `/v1/worker/attempts/${claim.json.data.attempt_id}:complete`,
        { outcome: "succeeded" },
        null,
      );
      assert.equal(done.status, 200, done.text);
      return t;
    };
    try {
      const sub = (await api.post("/v1/subscriptions", { name: "results", queue_id: q })).json.data.subscription.id;
      const s = await connect(node.url, { token: boot.token });
      await s.hello(sub, 1);
      const acked = await run("acked"); // delivered and ACKed: nothing needs it
      assert.equal((await s.ack(await s.nextOfType("event.deliver"))).type, "ack");
      const recent = await run("recent"); // as acked, but changed later (below)
      assert.equal((await s.ack(await s.nextOfType("event.deliver"))).type, "ack");
      const retried = await run("retried"); // as acked, its delivery PENDING again (below)
      assert.equal((await s.ack(await s.nextOfType("event.deliver"))).type, "ack");
      const unnumbered = await run("unnumbered"); // as acked, its event not numbered (below)
      assert.equal((await s.ack(await s.nextOfType("event.deliver"))).type, "ack");
      const leased = await run("leased"); // delivered, not ACKed: its consumer may read it
      await s.nextOfType("event.deliver");
      s.close();
      await s.closed;
      await new Promise((r) => setTimeout(r, 500)); // no consumer: what finishes now is not materialised
      const owed = await run("owed"); // its subscription is behind its event
      const queued = (await api.post("/v1/tasks", { queue_id: q, input: "queued" })).json.data.task.id; // not finished
      await waitSequenced(db, boot.namespace_id);

      // 40 days on, with a 30-day retention. Three more finished and ACKed tasks stay, each
      // for one reason set by hand: one changed 39 days on (a day before the cutoff), one
      // whose delivery is PENDING again (as a manual retry leaves it), one whose event
      // waits for its number (as a node that died before numbering leaves it).
      const later = Date.now() + 40 * DAY;
      await db.query("UPDATE tasks SET updated_at = updated_at + INTERVAL 39 DAY WHERE id = ?", [recent]);
      await db.query(
        "UPDATE deliveries d JOIN result_events r ON r.id = d.event_id SET d.state = 'PENDING', d.lease_until = NULL WHERE r.aggregate_id = ?",
        [retried],
      );
      await db.query("UPDATE result_events SET sequence = NULL WHERE aggregate_id = ?", [unnumbered]);
      const r = await sweepExpired(
        pool,
        { receiptMs: 7 * DAY, auditMs: 365 * DAY, sessionMs: 7 * DAY, taskMs: 30 * DAY },
        later,
      );
      assert.equal(r.tasks, 1);
      const left = (await db.query("SELECT id FROM tasks WHERE namespace_id = ?", [boot.namespace_id])).map(
        (t: { id: string }) => t.id,
      );
      assert.deepEqual(left.sort(), [leased, queued, owed, recent, retried, unnumbered].sort());
      assert.deepEqual(await db.query("SELECT id FROM task_attempts WHERE task_id = ?", [acked]), []);
      assert.equal((await api.get(`/v1/tasks/${acked}`)).status, 404);
      // Its result event stays in the log, with its snapshot.
      assert.equal(
        Number((await db.query("SELECT COUNT(*) AS n FROM result_events WHERE aggregate_id = ?", [acked]))[0].n),
        1,
      );
    } finally {
      await node.stop();
    }
  });

  it("refuses a malformed retention at start-up, naming the variable", async () => {
    for (const name of [
      "ORBIT_RECEIPT_RETENTION",
      "ORBIT_AUDIT_RETENTION",
      "ORBIT_SESSION_RETENTION",
      "ORBIT_TASK_RETENTION",
    ]) {
      for (const bad of ["7", "0d", "1w"]) {
        const res = await runCli(["serve"], { ORBIT_DATABASE_URL: db.url, ORBIT_PORT: "0", [name]: bad });
        assert.equal(res.code, 1, `${name}=${bad}: ${res.stdout}${res.stderr}`);
        assert.match(res.stderr + res.stdout, new RegExp(`${name} must look like 30d`));
      }
    }
  });
});

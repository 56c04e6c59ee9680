// Statements that must not grow with the tables they read (deliveries, audit records, tasks
// and attempts are kept for ever, result events until purged), and background work that
// must not lock the hot path out. Each case fills just enough rows that an unbounded
// statement would read all of them, and counts the index rows the statement walks (the session's
// Handler_read_next / Handler_read_prev), or holds a lock to catch the sweep in the act.
import { strict as assert } from "node:assert";
import mysql from "mysql2/promise";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { migrate } from "../../src/db/migrate.js";
import { createPool, type Pool } from "../../src/db/pool.js";
import type { Tx } from "../../src/db/types.js";
import { selectFirstSequenceSince } from "../../src/db/queries/result-log.js";
import {
  advanceCursorsPastPurge,
  selectSubscription,
  selectSubscriptionPage,
} from "../../src/db/queries/subscriptions.js";
import { expireDue } from "../../src/domain/worker.js";
import { newRowId } from "../../src/wire/ids.js";

/** Rows enough that reading them all is unmistakable next to the handful a bounded read walks. */
const HISTORY = 3000;
const NS = "00000000000a00000000000000000001";
const APP = "00000000000a00000000000000000002";
const CRED = "00000000000a00000000000000000003";
const QUEUE = "00000000000a00000000000000000004";
const ALL_TYPES = "task.cancelled,task.failed,task.needs_review,task.succeeded";
const T0 = Date.UTC(2024, 0, 1);

describe("statements at scale", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let conn: mysql.Connection;

  before(async () => {
    db = await freshDatabase("scaling");
    await migrate(db.url);
    conn = await mysql.createConnection({
      uri: db.url,
      timezone: "Z",
      multipleStatements: true,
      supportBigNumbers: true,
      bigNumberStrings: true,
    });
    await conn.query("SET SESSION max_recursive_iterations = ?", [HISTORY]);
    await conn.query("INSERT INTO namespaces VALUES (?, 'ns', UTC_TIMESTAMP(3))", [NS]);
    await conn.query("INSERT INTO applications VALUES (?, ?, 'app', UTC_TIMESTAMP(3))", [APP, NS]);
    await conn.query(
      "INSERT INTO credentials (id, namespace_id, application_id, secret_digest, actions, created_at) VALUES (?, ?, ?, UNHEX(SHA2('x', 256)), 'events:manage', UTC_TIMESTAMP(3))",
      [CRED, NS, APP],
    );
    await conn.query("INSERT INTO queues VALUES (?, ?, 'q', UTC_TIMESTAMP(3))", [QUEUE, NS]);
    await conn.query("INSERT INTO namespace_streams VALUES (?, ?, 0, UTC_TIMESTAMP(3))", [NS, HISTORY]);
    // Events 1..HISTORY of the queue, a second apart, every one a task.succeeded.
    await conn.query(
      `INSERT INTO result_events (id, namespace_id, queue_id, sequence, type, aggregate_id, aggregate_revision, occurred_at, details, snapshot)
       WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
       SELECT LPAD(HEX(i), 32, '0'), ?, ?, i, 'task.succeeded', LPAD(HEX(i), 32, 'a'), 2, ? + INTERVAL i SECOND, '{}', '{}' FROM n`,
      [HISTORY, NS, QUEUE, new Date(T0)],
    );
  });
  after(async () => {
    await conn?.end();
    await db?.drop();
  });

  /**
   * Index rows walked by the session while fn runs: those handed up (Handler_read_next and
   * _prev) and those an index condition turned down inside InnoDB (Handler_icp_attempts
   * less Handler_icp_match), which the first do not count.
   */
  async function indexRowsWalked(fn: () => Promise<unknown>): Promise<number> {
    const read = async () => {
      const [rows] = await conn.query<mysql.RowDataPacket[]>(
        "SHOW SESSION STATUS WHERE Variable_name IN ('Handler_read_next', 'Handler_read_prev', 'Handler_icp_attempts', 'Handler_icp_match')",
      );
      return rows.reduce((n, r) => n + (r.Variable_name === "Handler_icp_match" ? -1 : 1) * Number(r.Value), 0);
    };
    const before = await read();
    await fn();
    return (await read()) - before;
  }

  async function subscription(id: string, cursor: number, types = ALL_TYPES): Promise<void> {
    await conn.query(
      `INSERT INTO subscriptions (id, namespace_id, application_id, credential_id, queue_id, name, revision, enabled, types,
                                  cursor_sequence, max_pending, max_attempts, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, 1, TRUE, ?, ?, 1000, 5, UTC_TIMESTAMP(3), UTC_TIMESTAMP(3))`,
      [id, NS, APP, CRED, QUEUE, `s${id}`, types, cursor],
    );
  }

  it("the retention sweep finds the first young event from the boundary, not by reading the retained log", async () => {
    // The boundary at 2,990: the sweep passes the events that grew old since (10), not 3,000.
    const since = new Date(T0 + 2995 * 1000);
    let first: string | undefined;
    const walked = await indexRowsWalked(
      async () => (first = await selectFirstSequenceSince(conn as unknown as Pool, NS, "2990", since)),
    );
    assert.equal(first, "2995");
    assert.ok(walked < 50, `walked ${walked} index rows (MIN(sequence) over the namespace: ${HISTORY})`);
    assert.equal(
      await selectFirstSequenceSince(conn as unknown as Pool, NS, "2990", new Date(T0 + 4000 * 1000)),
      undefined,
      "none young",
    );
    assert.equal(await selectFirstSequenceSince(conn as unknown as Pool, NS, "0", new Date(T0)), "1");
  });

  it("a purge checks each lagging subscription from its cursor, not from the queue's first event", async () => {
    const matching = newRowId();
    const other = newRowId();
    await subscription(matching, HISTORY - 10);
    await subscription(other, HISTORY - 10, "task.failed");
    try {
      let moved = 0;
      const walked = await indexRowsWalked(async () => {
        await conn.query("START TRANSACTION");
        moved = await advanceCursorsPastPurge(conn as unknown as Tx, NS, String(HISTORY));
        await conn.query("COMMIT");
      });
      assert.equal(moved, 1, "the one with no event of its types up to the boundary");
      const [rows] = await conn.query<mysql.RowDataPacket[]>(
        "SELECT id, cursor_sequence FROM subscriptions WHERE id IN (?)",
        [[matching, other]],
      );
      const cursors = new Map(rows.map((r) => [r.id as string, String(r.cursor_sequence)]));
      assert.equal(cursors.get(matching), String(HISTORY - 10), "it would lose events: its claims report the gap");
      assert.equal(cursors.get(other), String(HISTORY));
      // Correlated in one UPDATE, each check would walk the queue's events from its first: 2 × 2,990.
      assert.ok(walked < 100, `walked ${walked} index rows`);
    } finally {
      await conn.query("DELETE FROM subscriptions WHERE id IN (?)", [[matching, other]]);
    }
  });

  it("pending_count reads a subscription's backlog, not its ACKED history, on a page of subscriptions", async () => {
    const id = newRowId();
    await subscription(id, HISTORY);
    try {
      // HISTORY deliveries: 5 PENDING, 2 LEASED, 1 EXPIRED, the rest ACKED (kept for ever).
      await conn.query(
        `INSERT INTO deliveries (id, subscription_id, event_id, sequence, revision, state, created_at, available_at, lease_epoch, lease_until, attempts, attempt_budget)
         WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
         SELECT LPAD(HEX(i), 32, 'd'), ?, LPAD(HEX(i), 32, '0'), i, 1,
                CASE WHEN i > ? - 5 THEN 'PENDING' WHEN i > ? - 7 THEN 'LEASED' WHEN i = 10 THEN 'EXPIRED' ELSE 'ACKED' END,
                UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), 0, IF(i > ? - 7 AND i <= ? - 5, UTC_TIMESTAMP(3) + INTERVAL 1 MINUTE, NULL), 0, 5 FROM n`,
        [HISTORY, id, HISTORY, HISTORY, HISTORY, HISTORY],
      );
      await conn.query("ANALYZE TABLE deliveries");
      let page: Awaited<ReturnType<typeof selectSubscriptionPage>> = [];
      const walked = await indexRowsWalked(
        async () => (page = await selectSubscriptionPage(conn as unknown as Pool, CRED, QUEUE, undefined, 21)),
      );
      assert.deepEqual(
        page.map((s) => [s.id, s.pending_count]),
        [[id, 8]],
      );
      assert.ok(walked < 50, `walked ${walked} index rows (every delivery: ${HISTORY})`);
      assert.equal((await selectSubscription(conn as unknown as Pool, id))!.pending_count, 8);
    } finally {
      await conn.query("DELETE FROM deliveries");
      await conn.query("DELETE FROM subscriptions WHERE id = ?", [id]);
    }
  });

  it("the attempt-expiry sweep takes no gap lock in front of new tasks while it works", async () => {
    // A RUNNING task whose lease ran out, and its attempt held by another transaction: the
    // sweep locks the task, then waits on the attempt's row with its transaction open.
    const task = newRowId();
    const attempt = newRowId();
    const past = new Date(Date.now() - 60_000);
    await conn.query(
      `INSERT INTO tasks (id, namespace_id, queue_id, state, revision, attempts, max_attempts, effect_uncertain, input,
                          current_attempt_id, lease_until, queued_at, created_at, updated_at)
       VALUES (?, ?, ?, 'RUNNING', 2, 1, 5, FALSE, '{}', ?, ?, ?, ?, ?)`,
      [task, NS, QUEUE, attempt, past, past, past, past],
    );
    await conn.query(
      "INSERT INTO task_attempts (id, task_id, number, started_at, lease_until) VALUES (?, ?, 1, ?, ?)",
      [attempt, task, past, past],
    );
    const holder = await db.connect();
    const submitter = await db.connect();
    const pool = createPool(db.url, 1);
    let sweep: Promise<unknown> | undefined;
    try {
      await holder.query("START TRANSACTION");
      await holder.query("SELECT id FROM task_attempts WHERE id = ? FOR UPDATE", [attempt]);
      sweep = expireDue(pool);
      // The sweep's UPDATE of the attempt is running, so it waits on the holder's lock.
      for (let i = 0; ; i++) {
        const [waiting] = await conn.query<mysql.RowDataPacket[]>(
          "SELECT 1 FROM information_schema.processlist WHERE db = DATABASE() AND info LIKE 'UPDATE task\\_attempts %'",
        );
        if (waiting.length > 0) break;
        assert.ok(i < 200, "the sweep never reached the held attempt");
        await new Promise((r) => setTimeout(r, 25));
      }
      // A submit: its tasks_lease entry (QUEUED, NULL, newest id) sorts right before the
      // first RUNNING one, in the gap a REPEATABLE READ scan of the expired leases locks.
      await submitter.query("SET SESSION innodb_lock_wait_timeout = 1");
      const now = new Date();
      await submitter.query(
        `INSERT INTO tasks (id, namespace_id, queue_id, state, revision, attempts, max_attempts, effect_uncertain, input, queued_at, created_at, updated_at)
         VALUES (?, ?, ?, 'QUEUED', 1, 0, 5, FALSE, '{}', ?, ?, ?)`,
        [newRowId(), NS, QUEUE, now, now, now],
      );
    } finally {
      await holder.query("ROLLBACK");
      await sweep;
      await holder.end();
      await submitter.end();
      await pool.end();
    }
    const [rows] = await conn.query<mysql.RowDataPacket[]>("SELECT state FROM tasks WHERE id = ?", [task]);
    assert.equal(rows[0]!.state, "QUEUED", "the sweep went on once the attempt was free");
  });
});

// The chaos run's history checker (check.ts) holds a real history to its rules: a small
// run through a real node (submits, completions, a cancel, an Inbox consumer) passes every
// check, and each way of breaking a rule — in the database, an Inbox or what clients were
// told — fails the check that names it.
import { strict as assert } from "node:assert";
import mysql from "mysql2/promise";
import { client, type Client } from "../helpers/api.js";
import { freshDatabase, MYSQL_SERVER, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { Consumer } from "../../src/sdk/index.js";
import { applyOnce, openInbox } from "../../examples/inbox/consumer.js";
import { checkHistory, type Subscription } from "./check.js";
import { outcomeOf } from "./outcome.js";
import { newHistory, type History } from "./traffic.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("chaos history checker", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let cred: BootstrapOutput;
  let node: OrbitNode;
  let api: Client;
  let inbox: mysql.Pool;
  let admin: mysql.Connection;
  const inboxName = `orbit_t_chaos_inbox_${process.pid}`;
  const history: History = newHistory();
  let subscription: Subscription;

  before(async () => {
    db = await freshDatabase("chaos_check");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
    node = await startNode(db.url);
    api = client(node.url, cred.token);
    const queueId = cred.queues[0]!.id;
    const sub = await api.post("/v1/subscriptions", { name: "s", queue_id: queueId });
    subscription = { id: sub.json.data.subscription.id as string, inbox: inboxName };
    for (let i = 0; i < 6; i++) {
      const t = await api.post("/v1/tasks", { queue_id: queueId, input: { i } });
      history.submitted.set(i, t.json.data.task.id as string);
      if (i === 5) {
        const c = await api.post(`/v1/tasks/${t.json.data.task.id}:cancel`, {
          expected_revision: t.json.data.task.revision,
          reason: "test",
        });
        assert.equal(c.status, 200);
        history.cancelled.add(t.json.data.task.id as string);
        continue;
      }
      const claim = await api.post("/v1/worker/claim", { queue_id: queueId });
      const { attempt_id, task } = claim.json.data as { attempt_id: string; task: { id: string } };
      const done = await api.post(`/v1/worker/attempts/${attempt_id}:complete`, outcomeOf(task.id));
      assert.equal(done.status, 200);
      history.completed.set(task.id, { state: done.json.data.task.state as string, attemptId: attempt_id });
    }
    inbox = await openInbox(`${MYSQL_SERVER}/${inboxName}`);
    const consumer = new Consumer({
      baseUrl: node.url,
      token: cred.token,
      subscriptionId: subscription.id,
      handler: async (event) => void (await applyOnce(inbox, event)),
      onAck: (r) => history.acksConfirmed.set(r.delivery_id, new Set([r.epoch])),
    }).start();
    admin = await db.connect();
    for (;;) {
      const [[row]] = await admin.query<mysql.RowDataPacket[]>(
        "SELECT COUNT(*) AS n FROM deliveries WHERE state = 'ACKED'",
      );
      if (Number(row!.n) === 6 && history.acksConfirmed.size === 6) break;
      await sleep(50);
    }
    await consumer.stop();
  });
  after(async () => {
    await admin?.end();
    await inbox?.query(`DROP DATABASE IF EXISTS \`${inboxName}\``);
    await inbox?.end();
    await node?.stop();
    await db?.drop();
  });

  const failing = async (h: History = history) =>
    (
      await checkHistory(admin, {
        namespaceId: cred.namespace_id,
        subscriptions: [subscription],
        history: h,
        nodeErrors: [],
        unexpectedExits: [],
      })
    )
      .filter((c) => c.problems.length > 0)
      .map((c) => c.name);

  /** Breaks the history with `statements`, expects `check` among the failures, and mends it again. */
  async function breaks(check: RegExp, statements: [string, unknown[]][], mends: [string, unknown[]][]) {
    for (const [sql, params] of statements) await admin.query(sql, params);
    try {
      const failed = await failing();
      assert.ok(
        failed.some((name) => check.test(name)),
        `expected a failure of ${check}, got [${failed.join("; ")}]`,
      );
    } finally {
      for (const [sql, params] of mends) await admin.query(sql, params);
    }
    assert.deepEqual(await failing(), []);
  }

  const aTask = () => [...history.completed.keys()][0]!;

  it("passes a history that keeps every rule", async () => {
    assert.deepEqual(await failing(), []);
  });

  it("fails a gap in the result log", async () => {
    await breaks(
      /no gap/,
      [["UPDATE result_events SET sequence = sequence + 100 WHERE sequence = 1", []]],
      [["UPDATE result_events SET sequence = sequence - 100 WHERE sequence = 101", []]],
    );
  });

  it("fails a task without its result event, and a task left RUNNING", async () => {
    const [{ type }] = await db.query("SELECT type FROM result_events WHERE aggregate_id = ?", [aTask()]);
    await breaks(
      /exactly one result event/,
      [["UPDATE result_events SET type = 'task.requeued' WHERE aggregate_id = ?", [aTask()]]],
      [["UPDATE result_events SET type = ? WHERE aggregate_id = ?", [type, aTask()]]],
    );
    const state = history.completed.get(aTask())!.state;
    await breaks(
      /every task ended/,
      [["UPDATE tasks SET state = 'RUNNING' WHERE id = ?", [aTask()]]],
      [["UPDATE tasks SET state = ? WHERE id = ?", [state, aTask()]]],
    );
  });

  /** The history as recorded, changed by `change`. */
  const variant = (change: (h: History) => void): History => {
    const h: History = {
      ...history,
      submitted: new Map(history.submitted),
      cancelled: new Set(history.cancelled),
      cancelRefused: new Set(history.cancelRefused),
      completed: new Map(history.completed),
      completionRefused: new Set(history.completionRefused),
      acksConfirmed: new Map(history.acksConfirmed),
    };
    change(h);
    return h;
  };
  const SUBMITS = "every confirmed submit is a task, and every task a confirmed submit";
  const WRITES =
    "every confirmed completion and cancel holds, no refused one took place, and every outcome is its worker's";

  it("fails a confirmed submit lost, and a task no submit was confirmed for (a duplicate)", async () => {
    assert.deepEqual(await failing(variant((h) => h.submitted.set(99, "f".repeat(32)))), [SUBMITS]);
    assert.deepEqual(await failing(variant((h) => h.submitted.delete(0))), [SUBMITS]);
  });

  it("fails a confirmed completion or cancel that did not hold, and a refused one that took place", async () => {
    const completion = history.completed.get(aTask())!;
    assert.deepEqual(await failing(variant((h) => h.completed.set(aTask(), { ...completion, state: "CANCELLED" }))), [
      WRITES,
    ]);
    // The task ended as answered, but by another attempt than the one told it was completed.
    const other = [...history.completed.values()][1]!.attemptId;
    assert.deepEqual(await failing(variant((h) => h.completed.set(aTask(), { ...completion, attemptId: other }))), [
      WRITES,
    ]);
    assert.deepEqual(await failing(variant((h) => h.completionRefused.add(completion.attemptId))), [WRITES]);
    const cancelled = [...history.cancelled][0]!;
    assert.deepEqual(await failing(variant((h) => h.cancelled.add(aTask()))), [WRITES]);
    assert.deepEqual(
      await failing(
        variant((h) => {
          h.cancelled.delete(cancelled);
          h.cancelRefused.add(cancelled);
        }),
      ),
      [WRITES],
    );
  });

  it("fails a delivery left open, or EXPIRED within its budget", async () => {
    for (const state of ["LEASED", "EXPIRED"]) {
      await breaks(
        /every delivery ended/,
        [
          [
            "UPDATE deliveries SET state = ? WHERE event_id = (SELECT id FROM result_events WHERE aggregate_id = ?)",
            [state, aTask()],
          ],
        ],
        [
          [
            "UPDATE deliveries SET state = 'ACKED' WHERE event_id = (SELECT id FROM result_events WHERE aggregate_id = ?)",
            [aTask()],
          ],
        ],
      );
    }
  });

  it("fails an ACKED event missing from its Inbox, and an effect applied twice", async () => {
    const [[row]] = await admin.query<mysql.RowDataPacket[]>(`SELECT * FROM \`${inboxName}\`.inbox LIMIT 1`);
    await breaks(
      /reached its Inbox/,
      [[`DELETE FROM \`${inboxName}\`.inbox WHERE event_id = ?`, [row!.event_id]]],
      [
        [
          `INSERT INTO \`${inboxName}\`.inbox VALUES (?, ?, ?, ?)`,
          [row!.event_id, row!.sequence, row!.task_id, row!.received_at],
        ],
      ],
    );
    await breaks(
      /effect applied once/,
      [[`UPDATE \`${inboxName}\`.outcome_totals SET n = n + 1 ORDER BY state LIMIT 1`, []]],
      [[`UPDATE \`${inboxName}\`.outcome_totals SET n = n - 1 ORDER BY state LIMIT 1`, []]],
    );
  });

  it("fails a confirmed ACK that did not hold: its delivery leased again after it", async () => {
    const event = "(SELECT id FROM result_events WHERE aggregate_id = ?)";
    await breaks(
      /every ACK the node confirmed holds/,
      [[`UPDATE deliveries SET lease_epoch = lease_epoch + 1 WHERE event_id = ${event}`, [aTask()]]],
      [[`UPDATE deliveries SET lease_epoch = lease_epoch - 1 WHERE event_id = ${event}`, [aTask()]]],
    );
  });

  it("fails a second ACK audit record of a delivery, and ACK audit records of one not ACKED", async () => {
    await breaks(
      /ACK audit record/,
      [
        [
          `INSERT INTO audit_records (id, namespace_id, credential_id, subscription_id, delivery_id, action, details, reason,
             revision_before, revision_after, created_at)
           SELECT CONCAT(REPEAT('d', 31), n.k), a.namespace_id, a.credential_id, a.subscription_id, d.id, a.action, a.details,
             a.reason, a.revision_before, a.revision_after, a.created_at
             FROM (SELECT * FROM audit_records WHERE action = 'delivery.ack' LIMIT 1) a
             JOIN (SELECT 1 AS k UNION SELECT 2) n
             JOIN deliveries d ON d.event_id = (SELECT id FROM result_events WHERE aggregate_id = ?)`,
          [aTask()],
        ],
        [
          "UPDATE deliveries SET state = 'LEASED' WHERE event_id = (SELECT id FROM result_events WHERE aggregate_id = ?)",
          [aTask()],
        ],
      ],
      [
        ["DELETE FROM audit_records WHERE id LIKE 'ddddddddddddddddddddddddddddddd_'", []],
        [
          "UPDATE deliveries SET state = 'ACKED' WHERE event_id = (SELECT id FROM result_events WHERE aggregate_id = ?)",
          [aTask()],
        ],
      ],
    );
    await breaks(
      /ACK audit record/,
      [
        [
          `INSERT INTO audit_records (id, namespace_id, credential_id, subscription_id, delivery_id, action, details, reason,
             revision_before, revision_after, created_at)
           SELECT REPEAT('e', 32), namespace_id, credential_id, subscription_id, delivery_id, action, details, reason,
             revision_before, revision_after, created_at FROM audit_records WHERE action = 'delivery.ack' LIMIT 1`,
          [],
        ],
      ],
      [["DELETE FROM audit_records WHERE id = REPEAT('e', 32)", []]],
    );
  });
});

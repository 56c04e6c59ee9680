// The Inbox example under SIGKILL: the consumer runs as a child process and is
// killed at random moments, at least 20 times over 300 results, and restarted each time.
// Afterwards every event is in the inbox exactly once, the business effect was applied
// exactly once per event, and every delivery ended ACKED.
import { strict as assert } from "node:assert";
import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import mysql from "mysql2/promise";
import { freshDatabase, MYSQL_SERVER, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client } from "../helpers/api.js";

const RESULTS = 300;
const KILLS = 20;
const CONSUMER = path.resolve("dist/examples/inbox/consumer.js");

describe("the Inbox example killed again and again", function () {
  this.timeout(240000);
  let db: TestDatabase;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  const inboxName = `orbit_t_inbox_kill_${process.pid}`;
  const inboxUrl = `${MYSQL_SERVER}/${inboxName}`;

  before(async () => {
    db = await freshDatabase("inbox_kill");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
    node = await startNode(db.url, { ORBIT_LEASE_DURATION_MS: "1000" });
  });
  after(async () => {
    await node?.stop();
    await db?.drop();
    const c = await mysql.createConnection({ uri: MYSQL_SERVER });
    await c.query(`DROP DATABASE IF EXISTS \`${inboxName}\``);
    await c.end();
  });

  it(`applies each of ${RESULTS} events exactly once across ${KILLS}+ SIGKILLs`, async () => {
    const api = client(node.url, cred.token);
    const q = cred.queues[0]!.id;
    const sub = (await api.post("/v1/subscriptions", { name: "inbox", queue_id: q })).json.data.subscription.id;
    const start = (): ChildProcess =>
      spawn(process.execPath, [CONSUMER], {
        env: {
          ...process.env,
          ORBIT_URL: node.url,
          ORBIT_TOKEN: cred.token,
          SUBSCRIPTION_ID: sub,
          INBOX_DATABASE_URL: inboxUrl,
          CAPACITY: "8",
        },
        stdio: ["ignore", "ignore", "ignore"],
      });
    // Results keep arriving while the consumer is killed and restarted.
    const producing = (async () => {
      for (let i = 0; i < RESULTS; i++) {
        const t = (await api.post("/v1/tasks", { queue_id: q, input: i })).json.data.task;
        if (i % 3 === 0) {
          assert.equal(
            (await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" })).status,
            200,
          );
        } else {
          const c = (await api.post("/v1/worker/claim", { queue_id: q }, null)).json.data;
          const done = await api.post(
            `/v1/worker/attempts/${c.attempt_id}:complete`,
            { outcome: i % 3 === 1 ? "succeeded" : "failed" },
            null,
          );
          assert.equal(done.status, 200);
        }
      }
    })();
    let kills = 0;
    for (; kills < KILLS; kills++) {
      const child = start();
      await new Promise((r) => setTimeout(r, 150 + Math.random() * 600));
      child.kill("SIGKILL");
      await new Promise((r) => child.once("exit", r));
    }
    await producing;
    const last = start();
    const until = Date.now() + 120000;
    // Every earlier consumer may have been killed before it created its tables (on a busy
    // machine a child can take longer to start than the 150-750 ms it is given): wait for
    // the last one to create them before counting.
    const admin = await mysql.createConnection({ uri: MYSQL_SERVER });
    try {
      const tables = async () =>
        Number(
          (
            (await admin.query(
              "SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = ? AND table_name IN ('inbox', 'outcome_totals')",
              [inboxName],
            )) as any
          )[0][0].n,
        );
      while ((await tables()) < 2) {
        assert.ok(Date.now() < until, "the last consumer never created its inbox tables");
        await new Promise((r) => setTimeout(r, 200));
      }
    } finally {
      await admin.end();
    }
    const inbox = await mysql.createConnection({ uri: inboxUrl });
    const orbitDb = await db.connect();
    try {
      const counts = async () => {
        const [[i]] = (await inbox.query("SELECT COUNT(*) AS n FROM inbox")) as any;
        const [[d]] = (await orbitDb.query(
          "SELECT SUM(state = 'ACKED') AS acked, COUNT(*) AS n FROM deliveries WHERE subscription_id = ?",
          [sub],
        )) as any;
        return { inbox: Number(i.n), acked: Number(d.acked ?? 0), deliveries: Number(d.n) };
      };
      let c = await counts();
      while (c.inbox < RESULTS || c.acked < RESULTS) {
        assert.ok(Date.now() < until, `not finished: ${JSON.stringify(c)}`);
        await new Promise((r) => setTimeout(r, 200));
        c = await counts();
      }
      assert.equal(kills, KILLS);
      assert.deepEqual(
        c,
        { inbox: RESULTS, acked: RESULTS, deliveries: RESULTS },
        "every delivery ACKED, one per event",
      );
      const [[totals]] = (await inbox.query("SELECT SUM(n) AS n FROM outcome_totals")) as any;
      assert.equal(Number(totals.n), RESULTS, "the effect was applied exactly once per event");
      const [events] = (await orbitDb.query("SELECT event_id FROM deliveries WHERE subscription_id = ?", [sub])) as any;
      const [stored] = (await inbox.query("SELECT event_id FROM inbox")) as any;
      assert.deepEqual(
        stored.map((r: any) => r.event_id).sort(),
        events.map((r: any) => r.event_id).sort(),
        "the inbox holds exactly the subscription's events",
      );
    } finally {
      last.kill("SIGTERM");
      await inbox.end();
      await orbitDb.end();
    }
  });
});

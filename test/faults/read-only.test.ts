// A failover as a node sees it: the real MariaDB is made to refuse writes to Orbit's own,
// unprivileged user (`read_only`, as a demoted writer does) and then to accept them again.
// Meanwhile every write is 503 UNAVAILABLE with Retry-After, never a 500, and nothing is
// half-written; afterwards the node serves fully again without a restart, and a write
// replayed with its key is done once.
import { strict as assert } from "node:assert";
import mysql from "mysql2/promise";
import { client, type Client } from "../helpers/api.js";
import { freshDatabase, MYSQL_SERVER, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";

describe("the database refuses writes for a while (read_only)", function () {
  this.timeout(120000);
  let db: TestDatabase;
  let admin: mysql.Connection;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  let api: Client;
  const user = `orbit_ro_${process.pid}`;

  const setReadOnly = (on: boolean) => admin.query(`SET GLOBAL read_only = ${on ? 1 : 0}`);

  before(async () => {
    db = await freshDatabase("read_only");
    admin = await mysql.createConnection({ uri: MYSQL_SERVER });
    await admin.query(`DROP USER IF EXISTS '${user}'@'127.0.0.1'`);
    await admin.query(`CREATE USER '${user}'@'127.0.0.1' IDENTIFIED BY 'pw'`);
    // Every privilege on its own database and nothing else: read_only binds it.
    await admin.query(`CREATE DATABASE IF NOT EXISTS \`${db.name}\``);
    await admin.query(`GRANT ALL ON \`${db.name}\`.* TO '${user}'@'127.0.0.1'`);
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"] });
    const url = new URL(db.url);
    url.username = user;
    url.password = "pw";
    node = await startNode(url.href, { ORBIT_DATABASE_SOCKET: "off" });
    api = client(node.url, cred.token);
  });
  after(async () => {
    await setReadOnly(false);
    await node?.stop();
    await admin.query(`DROP USER IF EXISTS '${user}'@'127.0.0.1'`);
    await admin.end();
  });

  const submit = (key: string) => api.post("/v1/tasks", { queue_id: cred.queues[0]!.id, input: { key } }, key);
  /** The server's ids of the node's open connections. */
  const connectionIds = async (): Promise<number[]> =>
    (
      (await admin.query("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ?", [user]))[0] as { ID: number }[]
    ).map((r) => Number(r.ID));

  it("answers 503 while writes are refused, then serves again, with nothing half-written", async () => {
    assert.equal((await submit("before")).status, 201);
    const claimed = await api.post("/v1/worker/claim", { queue_id: cred.queues[0]!.id }, null);
    assert.equal(claimed.status, 200, claimed.text);

    const before = await connectionIds();
    await setReadOnly(true);
    try {
      // Every pool connection meets the refusal: more writes than the pool has connections.
      for (let i = 0; i < 12; i++) {
        const res = await submit(`during-${i}`);
        assert.equal(res.status, 503, res.text);
        assert.equal(res.json.error.code, "UNAVAILABLE");
        assert.equal(res.headers["retry-after"], "1");
      }
      const done = await api.post(
        `/v1/worker/attempts/${claimed.json.data.attempt_id}:complete`,
        { outcome: "succeeded", result: { ok: true } },
        null,
      );
      assert.equal(done.status, 503, done.text);
      // Reads still work on a server that refuses writes.
      assert.equal((await api.get(`/v1/tasks/${claimed.json.data.task.id}`)).status, 200);
    } finally {
      await setReadOnly(false);
    }

    // Nothing of the refused writes is in the database.
    const keys = await db.query("SELECT idem_key FROM idempotency_keys WHERE idem_key LIKE 'during-%'");
    assert.deepEqual(keys, []);
    const [running] = await db.query("SELECT state FROM tasks WHERE id = ?", [claimed.json.data.task.id]);
    assert.equal(running.state, "RUNNING");

    // The connections that met the refusal were dropped, not given back to the pool.
    const after = await connectionIds();
    assert.ok(
      before.some((id) => !after.includes(id)),
      `every connection of the node is still the same: ${before.join(",")} / ${after.join(",")}`,
    );
    // Full service again, at once.
    for (let i = 0; i < 12; i++) {
      const res = await submit(`during-${i}`);
      assert.equal(res.status, 201, res.text);
      assert.equal(res.json.data.deduplicated, false);
    }
    const done = await api.post(
      `/v1/worker/attempts/${claimed.json.data.attempt_id}:complete`,
      { outcome: "succeeded", result: { ok: true } },
      null,
    );
    assert.equal(done.status, 200, done.text);
    const [count] = await db.query("SELECT COUNT(*) AS n FROM tasks");
    assert.equal(Number(count.n), 13);
    assert.ok(!node.lines.some((l) => l.includes('"status":500')), "a 500 was answered");
  });
});

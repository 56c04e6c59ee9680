// Operating Orbit: liveness, readiness, Prometheus metrics, and
// credential revocation reaching open event connections at their next claim.
import { strict as assert } from "node:assert";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import net from "node:net";
import mysql from "mysql2/promise";
import { freshDatabase, MYSQL_SERVER, type TestDatabase } from "../helpers/db.js";
import { bootstrap, runCli, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, type Client } from "../helpers/api.js";
import { request } from "../helpers/http.js";
import { assertContract, assertError } from "../helpers/contract.js";
import { connect } from "../helpers/ws.js";

describe("operating a node", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  let api: Client;

  before(async () => {
    db = await freshDatabase("operations");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
    node = await startNode(db.url, { ORBIT_METRICS_REFRESH_MS: "200" });
    api = client(node.url, cred.token);
  });
  after(async () => {
    await node?.stop();
    await db?.drop();
  });

  it("counts a client that drops its upload as the client's doing, not a database failure", async () => {
    const unavailable = async () => {
      const m = (await request(node.url, { path: "/metrics" })).text;
      return Number(/^orbit_database_errors_total\{kind="unavailable"\} (\d+)/m.exec(m)?.[1] ?? 0);
    };
    const before = await unavailable();
    const { port } = new URL(node.url);
    for (const path of ["/v1/tasks", `/v1/worker/attempts/${"0".repeat(32)}:complete`]) {
      const socket = net.connect(Number(port), "127.0.0.1");
      await new Promise((r) => socket.once("connect", r));
      socket.write(
        `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${cred.token}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"queue_id":`,
      );
      await new Promise((r) => setTimeout(r, 200));
      socket.resetAndDestroy();
    }
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(await unavailable(), before);
    assert.equal((await api.get(`/v1/tasks/${"0".repeat(32)}`)).status, 404, "the node serves on");
  });

  it("keeps serving when the reader of its log goes away (stdout closed: EPIPE)", async () => {
    const other = await startNode(db.url);
    try {
      other.process.stdout!.destroy();
      for (let i = 0; i < 20; i++) {
        // Each request writes a log line into the closed pipe.
        assert.equal((await request(other.url, { path: "/healthz" })).status, 200);
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.equal(other.process.exitCode, null, other.lines.join("\n"));
      assert.ok(!other.lines.some((l) => /EPIPE|at .*\(/.test(l)), "no stack trace on stderr");
    } finally {
      await other.stop();
    }
  });

  it("answers /healthz while the process is up, without a token", async () => {
    const res = await request(node.url, { path: "/healthz" });
    assert.equal(res.status, 200);
    assertContract("getLiveness", res);
    assert.deepEqual(res.json.data, { status: "ok" });
  });

  it("answers /readyz only when every known migration is applied", async () => {
    const migrations = readdirSync("migrations").filter((f) => f.endsWith(".sql")).length;
    const ready = await request(node.url, { path: "/readyz" });
    assert.equal(ready.status, 200);
    assertContract("getReadiness", ready);
    assert.deepEqual(ready.json.data, { status: "ready", migration: migrations });
    const c = await db.connect();
    try {
      await c.query("DELETE FROM schema_migrations WHERE version = ?", [migrations]);
      const behind = await request(node.url, { path: "/readyz" });
      assertError(behind, 503, "UNAVAILABLE");
      assertContract("getReadiness", behind);
    } finally {
      await c.query(
        "INSERT IGNORE INTO schema_migrations (version, name, applied_at) VALUES (?, 'restored', UTC_TIMESTAMP(3))",
        [migrations],
      );
      await c.end();
    }
    assert.equal((await request(node.url, { path: "/readyz" })).status, 200);
  });

  it("answers /readyz 503 on a database not created or not migrated yet (serve --no-migrate), and /v1/health 503 on a missing one", async () => {
    // The deploy docs/operations.md describes: nodes started with --no-migrate before the migrate
    // step ran. Neither case (ER_BAD_DB_ERROR, ER_NO_SUCH_TABLE) is a 500 INTERNAL.
    const empty = await freshDatabase("operations_unmigrated");
    const early = await startNode(empty.url, {}, ["--no-migrate"]);
    try {
      const missing = await request(early.url, { path: "/readyz" });
      assertError(missing, 503, "UNAVAILABLE");
      assertContract("getReadiness", missing);
      const health = await request(early.url, { path: "/v1/health" });
      assertError(health, 503, "UNAVAILABLE");
      assertContract("getHealth", health);
      // Every route that needs the database, not only the health checks (authentication
      // reads the credentials table first).
      const authed = await request(early.url, {
        path: "/v1/credential",
        headers: [["Authorization", `Bearer orbit_${"0".repeat(32)}_${"A".repeat(43)}`]],
      });
      assertError(authed, 503, "UNAVAILABLE");
      const admin = await mysql.createConnection({ uri: MYSQL_SERVER });
      try {
        await admin.query(`CREATE DATABASE \`${empty.name}\``);
      } finally {
        await admin.end();
      }
      const unmigrated = await request(early.url, { path: "/readyz" });
      assertError(unmigrated, 503, "UNAVAILABLE");
      assertError(
        await request(early.url, {
          path: "/v1/credential",
          headers: [["Authorization", `Bearer orbit_${"0".repeat(32)}_${"A".repeat(43)}`]],
        }),
        503,
        "UNAVAILABLE",
      );
      assert.equal((await request(early.url, { path: "/v1/health" })).status, 200);
      const migrated = await runCli(["migrate"], { ORBIT_DATABASE_URL: empty.url });
      assert.equal(migrated.code, 0, migrated.stderr);
      assert.equal((await request(early.url, { path: "/readyz" })).status, 200);
    } finally {
      await early.stop();
      await empty.drop();
    }
  });

  it("exposes Prometheus metrics: requests, connections, claims, deliveries, ACKs, lag and pending age", async () => {
    const q = cred.queues[0]!.id;
    const sub = (await api.post("/v1/subscriptions", { name: "metered", queue_id: q, max_pending: 3 })).json.data
      .subscription.id;
    for (let i = 0; i < 5; i++) {
      const t = (await api.post("/v1/tasks", { queue_id: q, input: i })).json.data.task;
      await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" });
    }
    const s = await connect(node.url, { token: cred.token });
    await s.hello(sub, 1);
    const d = await s.nextOfType("event.deliver");
    await s.ack(d);
    await s.ack(d);
    await s.nextOfType("event.deliver");
    // The database gauges are read in the background (every 200 ms here): the scrape
    // after the next refresh shows this backlog.
    let res = await request(node.url, { path: "/metrics" });
    for (const end = Date.now() + 5000; Date.now() < end;) {
      if (/^orbit_materialisation_lag_events_max 1$/m.test(res.text)) break;
      await new Promise((r) => setTimeout(r, 50));
      res = await request(node.url, { path: "/metrics" });
    }
    assert.equal(res.status, 200);
    assert.match(String(res.headers["content-type"]), /^text\/plain/);
    const m = res.text;
    const value = (re: RegExp) => Number(re.exec(m)?.[1] ?? NaN);
    assert.ok(value(/orbit_http_requests_total\{route="submitTask",status="201"\} (\d+)/) >= 5);
    assert.equal(value(/^orbit_event_connections (\d+)/m), 1);
    assert.match(m, /^orbit_claims_in_flight \d+/m);
    assert.match(m, /^orbit_claims_waiting \d+/m);
    assert.ok(value(/orbit_deliveries_total\{stage="created"\} (\d+)/) >= 3);
    assert.ok(value(/orbit_deliveries_total\{stage="leased"\} (\d+)/) >= 2);
    assert.ok(value(/^orbit_claim_duration_seconds_count (\d+)/m) >= 1, "claims are timed");
    assert.equal(
      value(/^orbit_claim_leases_sum (\d+)/m),
      value(/orbit_deliveries_total\{stage="leased"\} (\d+)/),
      "the claims' leases add up to the deliveries leased",
    );
    assert.equal(value(/orbit_deliveries_total\{stage="acked"\} (\d+)/), 1);
    assert.equal(value(/orbit_ack_outcomes_total\{outcome="acked"\} (\d+)/), 1);
    assert.equal(value(/orbit_ack_outcomes_total\{outcome="deduplicated"\} (\d+)/), 1);
    assert.equal(value(/^orbit_materialisation_lag_events_max (\d+)$/m), 1, "head 5, cursor 4 (backlog full)");
    assert.ok(value(/^orbit_oldest_pending_age_seconds_max ([0-9.e-]+)$/m) >= 0);
    assert.ok(value(/^orbit_metrics_refresh_age_seconds ([0-9.e-]+)$/m) < 5, "refreshed lately");
    // The tenants' port names no subscription: those series are the metrics listener's.
    assert.ok(!m.includes(sub), "no subscription id on the main port");
    assert.doesNotMatch(m, /subscription_id=/);
    assert.match(m, /^process_resident_memory_bytes \d+/m);
    const { version } = JSON.parse(readFileSync(path.resolve(process.cwd(), "package.json"), "utf8")) as {
      version: string;
    };
    assert.match(m, new RegExp(`^orbit_build_info\\{version="${version}",nodejs="${process.version}"\\} 1$`, "m"));
    assert.ok(!m.includes(cred.token.slice(-43)), "no secret in metrics");
    s.close();
  });

  it("closes an open event connection at its next claim once the credential is revoked", async () => {
    const other = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
    const otherApi = client(node.url, other.token);
    const q = other.queues[0]!.id;
    const sub = (await otherApi.post("/v1/subscriptions", { name: "revoked", queue_id: q })).json.data.subscription.id;
    const s = await connect(node.url, { token: other.token });
    await s.hello(sub, 1);
    const res = await runCli(["credential", "revoke", other.credential_id], { ORBIT_DATABASE_URL: db.url });
    assert.equal(res.code, 0, res.stderr);
    // A new result wakes the connection's claim, which finds the credential revoked.
    const t = (await api.post("/v1/tasks", { queue_id: q, input: 1 })).json.data.task;
    await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" });
    const e = await s.nextOfType("error");
    assert.equal(e.error!.code, "UNAUTHENTICATED");
    assert.equal(e.reply_to, undefined, "found by the claim, not a request");
    assert.equal((await s.closed).code, 1008);
    assert.equal(s.frames.filter((f) => f.type === "event.deliver").length, 0, "nothing was delivered to it");
    assertError(await otherApi.get(`/v1/subscriptions/${sub}`), 401, "UNAUTHENTICATED");
  });
});

// Orbit as deployed: two `orbit serve` nodes behind Debian's HAProxy, which ends TLS with a
// certificate this test makes, configured by docs/deploy/haproxy.cfg as shipped. An
// application (balancer-app.ts) trusts the test's CA as users trust a private one and
// talks to the balancer only: HTTPS management and task calls, WSS delivery. A node is
// killed while results flow; the application carries on through the balancer and gets
// every result.
import { strict as assert } from "node:assert";
import { execFile, execFileSync, spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import https from "node:https";
import { tmpdir } from "node:os";
import path from "node:path";
import type { TLSSocket } from "node:tls";
import { createInterface } from "node:readline";
import { promisify } from "node:util";
import WebSocket from "ws";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { freePort } from "../helpers/ports.js";

const run = promisify(execFile);
const CONFIG = path.resolve(process.cwd(), "docs/deploy/haproxy.cfg");
const APP = path.resolve(process.cwd(), "dist/test/deploy/balancer-app.js");
const TASKS = 60;

/** A GET through the balancer, trusting `ca` (or the system's CAs when omitted). */
function get(url: string, ca?: string): Promise<{ status: number; body: string; tls: string }> {
  return new Promise((resolve, reject) => {
    https
      .get(url, ca === undefined ? {} : { ca }, (res) => {
        const tls = (res.socket as TLSSocket).getProtocol() ?? "";
        let body = "";
        res.on("data", (d) => (body += d));
        res.on("end", () => resolve({ status: res.statusCode!, body, tls }));
      })
      .on("error", reject);
  });
}

/** This node's open event connections, read off its own /metrics (not through the balancer). */
async function eventConnections(node: OrbitNode): Promise<number> {
  const text = await (await fetch(`${node.url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith("orbit_event_connections "));
  return Number(line?.split(" ")[1] ?? 0);
}

describe("behind HAProxy with TLS, two nodes (docs/deploy/haproxy.cfg)", function () {
  this.timeout(180000);
  let dir: string;
  let ca: string;
  let db: TestDatabase;
  let boot: BootstrapOutput;
  let nodes: OrbitNode[];
  let haproxy: ChildProcess;
  let haproxyLog = "";
  let lb: string;

  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), "orbit-balancer-"));
    const [key, cert, pem] = ["key.pem", "cert.pem", "orbit.pem"].map((f) => path.join(dir, f)) as [
      string,
      string,
      string,
    ];
    // A self-signed certificate for the name the application dials: it is its own CA.
    await run("openssl", [
      "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
      "-addext", "subjectAltName=DNS:localhost", "-keyout", key, "-out", cert,
    ]); // prettier-ignore
    ca = readFileSync(cert, "utf8");
    writeFileSync(pem, ca + readFileSync(key, "utf8"));

    db = await freshDatabase("balancer");
    boot = await bootstrap(db.url, { namespace: "deploy", application: "shop", queues: ["orders"], eventAccess: true });
    // Short leases: what the killed node had leased comes back within seconds.
    const env = { ORBIT_LEASE_DURATION_MS: "2000", ORBIT_WORKER_LEASE_MS: "3000" };
    nodes = [await startNode(db.url, env), await startNode(db.url, env)];

    const port = await freePort();
    lb = `https://localhost:${port}`;
    const lbEnv = {
      ...process.env,
      ORBIT_LB_BIND: `127.0.0.1:${port}`,
      ORBIT_LB_CERT: pem,
      ORBIT_NODE_1: `127.0.0.1:${nodes[0]!.port}`,
      ORBIT_NODE_2: `127.0.0.1:${nodes[1]!.port}`,
    };
    execFileSync("haproxy", ["-c", "-q", "-f", CONFIG], { env: lbEnv }); // the shipped file is valid
    haproxy = spawn("haproxy", ["-db", "-f", CONFIG], { env: lbEnv, stdio: ["ignore", "pipe", "pipe"] });
    haproxy.stdout!.on("data", (d) => (haproxyLog += d));
    haproxy.stderr!.on("data", (d) => (haproxyLog += d));
    // Both nodes up in HAProxy's checks (rise 2, every second).
    for (const end = Date.now() + 20000; ;) {
      const ok = await get(`${lb}/v1/health`, ca).then(
        (r) => r.status === 200,
        () => false,
      );
      if (ok) break;
      assert.ok(Date.now() < end && haproxy.exitCode === null, `the balancer never answered:\n${haproxyLog}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    await new Promise((r) => setTimeout(r, 2500));
  });

  after(async () => {
    haproxy?.kill("SIGKILL");
    for (const n of nodes ?? []) await n.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("answers HTTPS with the test's certificate only, HTTP/1.1 over TLS", async () => {
    const health = await get(`${lb}/v1/health`, ca);
    assert.equal(health.status, 200);
    assert.match(health.tls, /^TLSv1\.[23]$/);
    assert.equal(JSON.parse(health.body).data.status, "ok");
    // A client that does not trust the certificate is refused by TLS, not answered.
    await assert.rejects(get(`${lb}/v1/health`), /self-signed certificate|unable to verify/);
    // An authenticated management call through the balancer.
    const res = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      https
        .get(`${lb}/v1/credential`, { ca, headers: { Authorization: `Bearer ${boot.token}` } }, (r) => {
          let body = "";
          r.on("data", (d) => (body += d));
          r.on("end", () => resolve({ status: r.statusCode!, body }));
        })
        .on("error", reject);
    });
    assert.equal(res.status, 200, res.body);
    assert.equal(JSON.parse(res.body).data.credential_id, boot.credential_id);
  });

  it("upgrades a WSS connection through the balancer with the subprotocol", async () => {
    const ws = new WebSocket(`${lb.replace("https:", "wss:")}/v1/events/connect`, "orbit.events.v1", {
      ca,
      headers: { Authorization: `Bearer ${boot.token}` },
    });
    await once(ws, "open");
    assert.equal(ws.protocol, "orbit.events.v1");
    ws.close(1000);
    await once(ws, "close");
  });

  it("delivers every result when the node holding the consumer is killed mid-stream", async () => {
    const app = spawn(process.execPath, [APP], {
      env: {
        ...process.env,
        NODE_EXTRA_CA_CERTS: path.join(dir, "cert.pem"),
        ORBIT_URL: lb,
        ORBIT_TOKEN: boot.token,
        ORBIT_QUEUE_ID: boot.queues[0]!.id,
        TASKS: String(TASKS),
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stderr = "";
    app.stderr!.on("data", (d) => (stderr += d));
    const lines: Record<string, unknown>[] = [];
    createInterface({ input: app.stdout! }).on("line", (l) => lines.push(JSON.parse(l) as Record<string, unknown>));
    const exited = once(app, "exit");
    const results = () => lines.filter((l) => typeof l.task_id === "string");
    try {
      for (const end = Date.now() + 60000; results().length < 15;) {
        assert.ok(Date.now() < end, `no results flowing: ${JSON.stringify(lines)}\n${stderr}`);
        await new Promise((r) => setTimeout(r, 20));
      }
      const counts = await Promise.all(nodes.map(eventConnections));
      const holder = counts.findIndex((c) => c > 0);
      assert.ok(holder >= 0, `no node holds the consumer's connection: ${counts.join(", ")}`);
      const receivedBefore = results().length;
      await nodes[holder]!.stop("SIGKILL");

      const timer = setTimeout(() => app.kill("SIGKILL"), 120000);
      const [code] = await exited;
      clearTimeout(timer);
      assert.equal(code, 0, `${JSON.stringify(lines.slice(-5))}\n${stderr}`);
      assert.ok(results().length > receivedBefore, "nothing was delivered after the node was killed");

      const ids = new Set(results().map((l) => l.task_id as string));
      assert.equal(ids.size, TASKS);
      const done = lines.at(-1)!;
      assert.deepEqual(done, { done: true, submitted: TASKS, received: TASKS, consumer: { stopped: true } });

      // In the database: every task succeeded once, one result event each, and every
      // delivery of the subscription ACKed; nothing pending.
      const [tasks] = await db.query("SELECT COUNT(*) AS n FROM tasks WHERE state = 'SUCCEEDED'");
      assert.equal(Number(tasks.n), TASKS);
      const sub = (lines.find((l) => typeof l.subscription === "string")!.subscription as string)!;
      const deliveries = await db.query(
        "SELECT state, COUNT(*) AS n FROM deliveries WHERE subscription_id = ? GROUP BY state",
        [sub],
      );
      assert.deepEqual(
        deliveries.map((d) => [d.state, Number(d.n)]),
        [["ACKED", TASKS]],
      );
    } finally {
      app.kill("SIGKILL");
    }
  });
});

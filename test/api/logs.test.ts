// The log lines of `orbit serve`: every line names its process and host; ORBIT_LOG_LEVEL
// drops the lines below it; an access line names the client's address and the
// authenticated credential (never the token), and believes X-Forwarded-For only from a
// proxy of ORBIT_TRUSTED_PROXIES.
import { strict as assert } from "node:assert";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import net from "node:net";
import os from "node:os";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, ORBIT_BIN, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { request } from "../helpers/http.js";
import { connect } from "../helpers/ws.js";
import { freePort } from "../helpers/ports.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Line = Record<string, unknown>;

function parsed(lines: readonly string[]): Line[] {
  return lines.flatMap((l) => {
    try {
      return [JSON.parse(l) as Line];
    } catch {
      return [];
    }
  });
}

/** The access line of the request with this id, once the node wrote it. */
async function accessLine(node: OrbitNode, requestId: string): Promise<Line> {
  for (const end = Date.now() + 5000; Date.now() < end; await sleep(20)) {
    const line = parsed(node.lines).find((l) => l.msg === "request" && l.request_id === requestId);
    if (line) return line;
  }
  assert.fail(`no access line for ${requestId}`);
}

/** A GET with its own request id and these headers; returns the access line it made. */
async function logged(node: OrbitNode, path: string, headers: [string, string][] = []): Promise<Line> {
  const id = randomBytes(16).toString("hex");
  await request(node.url, { path, headers: [["X-Request-ID", id], ...headers] });
  return accessLine(node, id);
}

describe("log lines", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let cred: BootstrapOutput;
  const nodes: OrbitNode[] = [];

  before(async () => {
    db = await freshDatabase("logs");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
  });
  afterEach(async () => {
    await Promise.all(nodes.splice(0).map((n) => n.stop()));
  });
  after(async () => {
    await db?.drop();
  });

  async function node(env: Record<string, string> = {}): Promise<OrbitNode> {
    const n = await startNode(db.url, env);
    nodes.push(n);
    return n;
  }

  it("names pid and hostname on every line", async () => {
    const n = await node();
    await logged(n, "/healthz");
    const lines = parsed(n.lines);
    assert.ok(lines.length >= 3, "migrated, database, listening, request");
    for (const l of lines) {
      assert.equal(l.pid, n.process.pid, JSON.stringify(l));
      assert.equal(l.hostname, os.hostname(), JSON.stringify(l));
    }
  });

  it("access lines carry client_address, and credential_id once authenticated, never the token", async () => {
    const n = await node();
    const authed = await logged(n, "/v1/credential", [["Authorization", `Bearer ${cred.token}`]]);
    assert.equal(authed.status, 200);
    assert.equal(authed.credential_id, cred.credential_id);
    assert.equal(authed.client_address, "127.0.0.1");
    const anonymous = await logged(n, "/healthz");
    assert.equal(anonymous.credential_id, undefined);
    assert.equal(anonymous.client_address, "127.0.0.1");
    // A token that authenticates nothing names no credential, though it names an id.
    const forged = await logged(n, "/v1/credential", [
      ["Authorization", `Bearer orbit_${"0".repeat(32)}_${"A".repeat(43)}`],
    ]);
    assert.equal(forged.status, 401);
    assert.equal(forged.credential_id, undefined);
    // The WebSocket upgrade's line too.
    const s = await connect(n.url, { token: cred.token });
    s.close();
    let upgrade: Line | undefined;
    for (const end = Date.now() + 5000; !upgrade && Date.now() < end; await sleep(20))
      upgrade = parsed(n.lines).find((l) => l.route === "connectEvents" && l.status === 101);
    assert.equal(upgrade?.credential_id, cred.credential_id);
    assert.equal(upgrade?.client_address, "127.0.0.1");
    assert.ok(!n.lines.some((l) => l.includes(cred.token.slice(-43))), "no secret in any line");
  });

  it("believes X-Forwarded-For only from a trusted proxy, walking it from the right", async () => {
    const xff = (v: string): [string, string][] => [["X-Forwarded-For", v]];
    const untrusting = await node();
    assert.equal((await logged(untrusting, "/healthz", xff("203.0.113.7"))).client_address, "127.0.0.1");

    const otherProxies = await node({ ORBIT_TRUSTED_PROXIES: "10.0.0.0/8" });
    assert.equal(
      (await logged(otherProxies, "/healthz", xff("203.0.113.7"))).client_address,
      "127.0.0.1",
      "the peer is no trusted proxy: its header is the client's own",
    );

    const trusting = await node({ ORBIT_TRUSTED_PROXIES: "127.0.0.1, 10.0.0.0/8" });
    const via = async (...headers: [string, string][]) => (await logged(trusting, "/healthz", headers)).client_address;
    assert.equal(await via(), "127.0.0.1", "no header: the peer");
    assert.equal(await via(...xff("203.0.113.7")), "203.0.113.7");
    assert.equal(await via(...xff("198.51.100.1, 10.1.2.3")), "198.51.100.1", "trusted hops skipped");
    assert.equal(await via(...xff("198.51.100.1, 192.0.2.9")), "192.0.2.9", "what the client wrote is not believed");
    assert.equal(await via(...xff("198.51.100.1"), ...xff("192.0.2.9")), "192.0.2.9", "repeated headers in order");
    assert.equal(await via(...xff("2001:db8::1")), "2001:db8::1");
    assert.equal(await via(...xff("[2001:db8::2]:4711")), "2001:db8::2");
    assert.equal(await via(...xff("::ffff:203.0.113.9")), "203.0.113.9");
    assert.equal(await via(...xff("nonsense")), "127.0.0.1", "not an address: the last one believed");
    assert.equal(await via(...xff("203.0.113.7, nonsense, 10.1.2.3")), "10.1.2.3");
  });

  it("ORBIT_LOG_LEVEL=debug writes debug lines; the default (info) does not", async () => {
    const debug = await node({ ORBIT_LOG_LEVEL: "debug", ORBIT_METRICS_REFRESH_MS: "100" });
    const info = await node({ ORBIT_METRICS_REFRESH_MS: "100" });
    await sleep(500);
    assert.ok(parsed(debug.lines).some((l) => l.level === "debug" && l.msg === "metrics refreshed"));
    assert.ok(!parsed(info.lines).some((l) => l.level === "debug"));
    assert.ok(parsed(info.lines).some((l) => l.msg === "listening"));
  });

  it("ORBIT_LOG_LEVEL=warn drops info lines (start-up, requests) and keeps warnings", async () => {
    const port = await freePort();
    const child = spawn(process.execPath, [ORBIT_BIN, "serve"], {
      env: {
        ...process.env,
        ORBIT_DATABASE_URL: db.url,
        ORBIT_HOST: "127.0.0.1",
        ORBIT_PORT: String(port),
        ORBIT_LOG_LEVEL: "warn",
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    const exited = new Promise<number | null>((resolve) => child.on("exit", resolve));
    const url = `http://127.0.0.1:${port}`;
    try {
      let up = false;
      for (const end = Date.now() + 20000; !up && Date.now() < end; await sleep(100))
        up = await request(url, { path: "/healthz" }).then(
          (r) => r.status === 200,
          () => false,
        );
      assert.ok(up, "the node serves");
      await request(url, { path: "/no-such-path" });
      // A request Node cannot parse: logged as a warning (client error).
      const s = net.connect(port, "127.0.0.1");
      await new Promise((r) => s.once("connect", r));
      s.resume().end("NOT HTTP\r\n\r\n");
      await new Promise((r) => s.once("close", r));
    } finally {
      child.kill("SIGTERM");
    }
    assert.equal(await exited, 0);
    const lines = parsed(out.split("\n"));
    assert.ok(
      lines.some((l) => l.level === "warn" && l.msg === "client error"),
      out,
    );
    assert.deepEqual(
      lines.filter((l) => l.level === "info" || l.level === "debug"),
      [],
      "no listening, request or stopped line",
    );
  });
});

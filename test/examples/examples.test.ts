// The three examples run as a user runs them (npm run example:…) against a real node,
// and show what their README promises.
import { strict as assert } from "node:assert";
import { execFile } from "node:child_process";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { startNode, type OrbitNode } from "../helpers/orbit.js";

function run(script: string, env: Record<string, string>): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile("npm", ["run", "-s", script], { env: { ...process.env, ...env }, timeout: 120000 }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, out: stdout + stderr }),
    );
  });
}

describe("examples", function () {
  this.timeout(180000);
  let db: TestDatabase;
  let node: OrbitNode;
  let env: Record<string, string>;

  before(async () => {
    db = await freshDatabase("examples");
    // A short lease: the demo's killed consumer held leases that must come back quickly.
    node = await startNode(db.url, { ORBIT_LEASE_DURATION_MS: "2000" });
    env = { ORBIT_URL: node.url, ORBIT_DATABASE_URL: db.url };
  });
  after(async () => {
    await node?.stop();
    await db?.drop();
  });

  it("management: create, read, pause, resume, and an idempotent replay", async () => {
    const r = await run("example:management", env);
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /created [0-9a-f]{32} revision 1 deduplicated=false/);
    assert.match(r.out, /paused: enabled=false revision 2/);
    assert.match(r.out, /resumed: enabled=true revision 3/);
    assert.match(r.out, /replayed create: deduplicated=true revision 1/);
    assert.match(r.out, /same key, other content: 409 IDEMPOTENCY_CONFLICT/);
  });

  it("management: exits 1 when the node does not keep idempotency (a replay creates again, other content is taken)", async () => {
    // The example printed whatever it got and exited 0: against a node without
    // idempotency it "showed" idempotency all the same (README: any unexpected answer exits 1).
    // A node that forgets keys: every create is new (201, revision 1); reads and
    // configures behave.
    const subs = new Map<string, Record<string, unknown>>();
    const forgetful = http.createServer((req, res) => {
      let text = "";
      req.on("data", (d) => (text += d));
      req.on("end", () => {
        const answer = (status: number, data: unknown) => {
          res.writeHead(status, { "Content-Type": "application/json" });
          res.end(JSON.stringify({ request_id: "7".repeat(32), data }));
        };
        if (req.url === "/v1/subscriptions") {
          const body = JSON.parse(text) as Record<string, unknown>;
          const sub = { ...body, id: String(subs.size + 1).padStart(32, "2"), revision: "1", enabled: true, types: ["task.succeeded"], cursor_sequence: "0" };
          subs.set(sub.id, sub);
          return answer(201, { subscription: sub, deduplicated: false });
        }
        const [, id, configure] = /^\/v1\/subscriptions\/([0-9a-f]{32})(:configure)?$/.exec(req.url ?? "") ?? [];
        const sub = subs.get(id ?? "");
        if (!sub) return answer(404, null);
        if (!configure) return answer(200, sub);
        const body = JSON.parse(text) as { enabled: boolean };
        Object.assign(sub, { enabled: body.enabled, revision: String(Number(sub.revision) + 1) });
        return answer(200, { subscription: sub, deduplicated: false });
      });
    });
    await new Promise<void>((resolve) => forgetful.listen(0, "127.0.0.1", resolve));
    try {
      const port = (forgetful.address() as AddressInfo).port;
      const r = await run("example:management", { ORBIT_URL: `http://127.0.0.1:${port}`, ORBIT_TOKEN: `orbit_${"0".repeat(32)}_${"A".repeat(43)}`, ORBIT_QUEUE_ID: "1".repeat(32) });
      assert.equal(r.code, 1, r.out);
      assert.match(r.out, /the replayed create was not deduplicated/);
    } finally {
      forgetful.close();
    }
  });

  it("protocol: a re-sent ACK on a new session is deduplicated with the original time", async () => {
    const r = await run("example:protocol", env);
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /re-sent ACK: deduplicated=true acknowledged_at=(\S+)/);
    const [, at] = /re-sent ACK: deduplicated=true acknowledged_at=(\S+)/.exec(r.out)!;
    assert.ok(r.out.includes(`acknowledged_at ${at} (the original)`));
  });

  it("inbox: killed halfway, every event is applied once", async () => {
    const r = await run("example:inbox", { ...env, RESULTS: "20" });
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /killed the consumer with SIGKILL/);
    assert.match(r.out, /inbox: 20 events; effects applied: 20/);
    assert.match(r.out, /deliveries ACKED: 20 of 20/);
  });
});

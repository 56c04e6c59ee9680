// The three examples run as a user runs them (npm run example:…) against a real node,
// and show what their README promises.
import { strict as assert } from "node:assert";
import { execFile } from "node:child_process";
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

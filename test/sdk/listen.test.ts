// `orbit listen`: a terminal consumer printing one JSON line per event, ACKing after
// printing (or not, with --no-ack), stopping on codes it must not retry.
import { strict as assert } from "node:assert";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, ORBIT_BIN, runCli, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, type Client } from "../helpers/api.js";

describe("orbit listen", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  let api: Client;

  before(async () => {
    db = await freshDatabase("listen");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q", "r"], eventAccess: true });
    node = await startNode(db.url);
    api = client(node.url, cred.token);
  });
  after(async () => {
    await node?.stop();
    await db?.drop();
  });

  function listen(args: string[], env: Record<string, string> = {}) {
    const child = spawn(process.execPath, [ORBIT_BIN, "listen", ...args], {
      env: { ...process.env, ORBIT_TOKEN: cred.token, ORBIT_URL: node.url, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const lines: any[] = [];
    let stderr = "";
    createInterface({ input: child.stdout! }).on("line", (l) => lines.push(JSON.parse(l)));
    child.stderr!.on("data", (d) => (stderr += d));
    const exit = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
    return { child, lines, exit, stderr: () => stderr };
  }
  async function result(q: string): Promise<void> {
    const t = (await api.post("/v1/tasks", { queue_id: q, input: 1 })).json.data.task;
    await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" });
  }
  async function acked(sub: string): Promise<number> {
    const c = await db.connect();
    try {
      return Number(
        (
          (
            await c.query<any[]>("SELECT COUNT(*) AS n FROM deliveries WHERE subscription_id = ? AND state = 'ACKED'", [
              sub,
            ])
          )[0] as any[]
        )[0].n,
      );
    } finally {
      await c.end();
    }
  }
  const until = async (cond: () => boolean | Promise<boolean>) => {
    for (const end = Date.now() + 15000; !(await cond());) {
      assert.ok(Date.now() < end, "not reached in time");
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  it("prints each event as a JSON line, ACKs it, and exits 0 on SIGINT", async () => {
    const q = cred.queues[0]!.id;
    const sub = (await api.post("/v1/subscriptions", { name: "listen", queue_id: q })).json.data.subscription.id;
    const l = listen(["--subscription", sub, "--capacity", "2"]);
    await new Promise((r) => setTimeout(r, 500));
    for (let i = 0; i < 3; i++) await result(q);
    await until(() => l.lines.length === 3);
    assert.ok(l.lines.every((e) => e.type === "task.cancelled" && e.snapshot.schema_version === 1));
    await until(async () => (await acked(sub)) === 3);
    assert.match(l.stderr(), /task\.cancelled task [0-9a-f]{32}/);
    l.child.kill("SIGINT");
    assert.equal(await l.exit, 0);
  });

  it("does not ACK with --no-ack", async () => {
    const q = cred.queues[1]!.id;
    const sub = (await api.post("/v1/subscriptions", { name: "tail", queue_id: q })).json.data.subscription.id;
    const l = listen(["--subscription", sub, "--no-ack"]);
    await new Promise((r) => setTimeout(r, 500));
    await result(q);
    await until(() => l.lines.length === 1);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(await acked(sub), 0);
    l.child.kill("SIGTERM");
    assert.equal(await l.exit, 0);
  });

  it("stops cleanly when its stdout is closed (| head), without ACKing what it could not print", async () => {
    const q = cred.queues[1]!.id;
    const sub = (await api.post("/v1/subscriptions", { name: "piped", queue_id: q })).json.data.subscription.id;
    await result(q);
    const child = spawn(
      "bash",
      [
        "-c",
        `"${process.execPath}" "${ORBIT_BIN}" listen --subscription ${sub} --capacity 1 | head -n 1; echo "listen exit \${PIPESTATUS[0]}" >&2`,
      ],
      {
        env: { ...process.env, ORBIT_TOKEN: cred.token, ORBIT_URL: node.url },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let stderr = "";
    child.stderr!.on("data", (d) => (stderr += d));
    const exit = new Promise<void>((r) => child.on("exit", () => r()));
    await until(async () => (await acked(sub)) === 1);
    await result(q);
    await result(q);
    await exit;
    assert.match(stderr, /listen exit 1/);
    assert.doesNotMatch(stderr, /Unhandled 'error' event|\n\s+at /, "a short message, not a crash");
    assert.equal(await acked(sub), 1, "only the printed event is ACKed");
  });

  it("stops with exit 1 on a subscription it cannot see, and refuses bad arguments", async () => {
    const l = listen(["--subscription", "0".repeat(32)]);
    assert.equal(await l.exit, 1);
    assert.match(l.stderr(), /NOT_FOUND/);
    for (const args of [[], ["--subscription", "xyz"], ["--subscription", "0".repeat(32), "--capacity", "33"]]) {
      assert.equal((await runCli(["listen", ...args], { ORBIT_TOKEN: cred.token })).code, 2, args.join(" "));
    }
    const noToken = await runCli(["listen", "--subscription", "0".repeat(32)], { ORBIT_TOKEN: "" });
    assert.equal(noToken.code, 2);
    assert.match(noToken.stderr, /ORBIT_TOKEN/);
  });

  it("refuses an ORBIT_URL or ORBIT_TOKEN no connection could use with exit 2, never retrying it forever", async () => {
    // Retried, each of these would fail every few seconds, for ever: "Invalid URL", "Invalid character in header content".
    const envs = [
      { ORBIT_URL: "not a url" },
      { ORBIT_URL: "ftp://127.0.0.1:1" },
      { ORBIT_URL: `${node.url}/?x=1` },
      { ORBIT_TOKEN: `${cred.token}\nx` },
    ];
    for (const env of envs) {
      const l = listen(["--subscription", "0".repeat(32)], env);
      const code = await Promise.race([l.exit, new Promise((r) => setTimeout(() => r("still running"), 5000))]);
      l.child.kill();
      assert.equal(code, 2, `${JSON.stringify(env)}: ${l.stderr().slice(0, 300)}`);
      assert.match(l.stderr(), /ORBIT_URL|ORBIT_TOKEN/);
      assert.ok(!l.stderr().includes(cred.token.slice(-43)), "the token is never echoed");
    }
  });
});

// The three examples run as a user runs them (npm run example:…) against a real node,
// and show what their README promises.
import { strict as assert } from "node:assert";
import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import mysql from "mysql2/promise";
import { client } from "../helpers/api.js";
import { freshDatabase, MYSQL_SERVER, type TestDatabase } from "../helpers/db.js";
import { cancelledResults } from "../helpers/fixtures.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { startProxy, type Proxy } from "../helpers/proxy.js";

function run(script: string, env: Record<string, string>): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(
      "npm",
      ["run", "-s", script],
      { env: { ...process.env, ...env }, timeout: 120000 },
      (err, stdout, stderr) =>
        resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, out: stdout + stderr }),
    );
  });
}

const PROTOCOL_EXAMPLE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../examples/protocol.js");
const INBOX_DEMO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../examples/inbox/demo.js");
const INBOX_CONSUMER = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../examples/inbox/consumer.js");

/** Runs the protocol example against `url` with a credential and queue of the test's; `killed` when it was still waiting after `timeoutMs`. */
function runProtocol(
  url: string,
  cred: BootstrapOutput,
  timeoutMs: number,
): Promise<{ code: number | null; killed: boolean; out: string }> {
  return new Promise((resolve) => {
    const env = { ...process.env, ORBIT_URL: url, ORBIT_TOKEN: cred.token, ORBIT_QUEUE_ID: cred.queues[0]!.id };
    execFile(process.execPath, [PROTOCOL_EXAMPLE], { env, timeout: timeoutMs }, (err, stdout, stderr) => {
      const e = err as (Error & { code?: number; killed?: boolean }) | null;
      resolve({
        code: e ? (typeof e.code === "number" ? e.code : null) : 0,
        killed: Boolean(e?.killed),
        out: stdout + stderr,
      });
    });
  });
}

async function until(cond: () => Promise<boolean>, ms = 15000): Promise<void> {
  for (const end = Date.now() + ms; !(await cond());) {
    assert.ok(Date.now() < end, "condition not reached in time");
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("examples", function () {
  this.timeout(180000);
  let db: TestDatabase;
  let node: OrbitNode;
  let env: Record<string, string>;
  /** The highest lease epoch among the deliveries on a queue: 2 once one was re-sent. */
  const leaseEpoch = async (queueId: string) =>
    Number(
      (
        await db.query(
          "SELECT MAX(d.lease_epoch) AS epoch FROM deliveries d JOIN subscriptions s ON s.id = d.subscription_id WHERE s.queue_id = ?",
          [queueId],
        )
      )[0]?.epoch ?? 0,
    );

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
    const logged = node.lines.length;
    const r = await run("example:management", env);
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /created [0-9a-f]{32} revision 1 deduplicated=false/);
    assert.match(r.out, /paused: enabled=false revision 2/);
    // docs/protocol.md §3: resume with a new key and the revision a QUERY returns — a
    // write's receipt is its original state, not the current one. The node's access log
    // shows the calls the example made, in order.
    const calls = node.lines.slice(logged).flatMap((l) => {
      try {
        const o = JSON.parse(l) as { msg?: string; route?: string };
        return o.msg === "request" && o.route ? [o.route] : [];
      } catch {
        return [];
      }
    });
    const pause = calls.indexOf("configureSubscription");
    const resume = calls.indexOf("configureSubscription", pause + 1);
    assert.ok(pause >= 0 && resume > pause, calls.join(" "));
    assert.ok(
      calls.slice(pause + 1, resume).includes("getSubscription"),
      `the resume reads the subscription first: ${calls.join(" ")}`,
    );
    assert.match(r.out, /read back: enabled=false revision 2/);
    assert.match(r.out, /resumed: enabled=true revision 3/);
    assert.match(r.out, /replayed create: deduplicated=true revision 1/);
    assert.match(r.out, /same key, other content: 409 IDEMPOTENCY_CONFLICT/);
  });

  it("management: exits 1 when the node does not keep idempotency (a replay creates again, other content is taken)", async () => {
    // The example must not print whatever it gets and exit 0: against a node without
    // idempotency it would "show" idempotency all the same (README: any unexpected answer exits 1).
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
          const sub = {
            ...body,
            id: String(subs.size + 1).padStart(32, "2"),
            revision: "1",
            enabled: true,
            types: ["task.succeeded"],
            cursor_sequence: "0",
          };
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
      const r = await run("example:management", {
        ORBIT_URL: `http://127.0.0.1:${port}`,
        ORBIT_TOKEN: `orbit_${"0".repeat(32)}_${"A".repeat(43)}`,
        ORBIT_QUEUE_ID: "1".repeat(32),
      });
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

  describe("protocol: exits 1 on an unexpected answer to the re-sent ACK instead of waiting for ever", () => {
    // Waiting only for an "ack" frame, an error frame, a close or silence would leave it
    // hanging (examples/README: any unexpected answer exits 1). Each answer comes from the
    // real node behind a proxy: the example ACKs on its first connection and re-sends that
    // ACK on its second, so the re-sent ACK is the second "event.ack" through the proxy.
    const cases: {
      what: string;
      arm(proxy: Proxy): void;
      whileRunning?(proxy: Proxy, queueId: string): Promise<void>;
      says: RegExp;
    }[] = [
      {
        // The first ACK is lost with its connection; the lease (2 s) runs out and the node
        // re-sends the delivery to the new session under epoch 2. The re-sent ACK, held
        // until then, carries the replaced proof: DELIVERY_LEASE_LOST (docs/protocol.md §6).
        what: "an error frame",
        arm: (proxy) => {
          void proxy.cutWhen("event.ack");
          proxy.holdClientWhen("event.ack", 2);
        },
        whileRunning: async (proxy, queueId) => {
          await until(async () => (await leaseEpoch(queueId)) >= 2);
          proxy.release();
        },
        says: /waiting for ack: the node answered an error frame: DELIVERY_LEASE_LOST/,
      },
      // The connection is cut as the re-sent ACK goes out: no close frame, hence 1006.
      {
        what: "the connection closing",
        arm: (proxy) => void proxy.cutWhen("event.ack", 2),
        says: /waiting for ack: the connection closed \(1006\)/,
      },
      // The re-sent ACK, and all after it, never reaches the node; the connection stays open.
      {
        what: "no answer at all",
        arm: (proxy) => proxy.muteClientWhen("event.ack", 2),
        says: /no ack within 10000 ms/,
      },
    ];
    for (const { what, arm, whileRunning, says } of cases) {
      it(what, async () => {
        const cred = await bootstrap(db.url, {
          namespace: `protocol-${what.replace(/\W+/g, "-")}`,
          application: "protocol",
          queues: ["protocol"],
          eventAccess: true,
        });
        const proxy = await startProxy(node.port);
        try {
          arm(proxy);
          const running = runProtocol(proxy.url, cred, 25000);
          await whileRunning?.(proxy, cred.queues[0]!.id);
          const r = await running;
          assert.equal(r.killed, false, `still waiting after 25 s:\n${r.out}`);
          assert.equal(r.code, 1, r.out);
          assert.match(r.out, says);
        } finally {
          await proxy.close();
        }
      });
    }
  });

  it("inbox: exits 1, not waits for ever, when its restarted consumer dies before the inbox is full", async () => {
    const demo = spawn(process.execPath, [INBOX_DEMO], { env: { ...process.env, ...env, RESULTS: "200" } });
    let out = "";
    let killed = false;
    demo.stdout.on("data", (d: Buffer) => {
      out += d.toString();
      if (killed || !out.includes("starting it again")) return;
      killed = true;
      // The restarted consumer is the demo's one live child: kill it before it has caught up.
      execFile("pkill", ["-KILL", "-P", String(demo.pid)]);
    });
    demo.stderr.on("data", (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => demo.kill("SIGKILL"), 60000);
    const [code, signal] = (await once(demo, "exit")) as [number | null, string | null];
    clearTimeout(timer);
    assert.ok(killed, out);
    assert.equal(signal, null, `the demo was still waiting after 60 s: ${out}`);
    assert.equal(code, 1, out);
    assert.match(out, /inbox demo failed: the consumer exited \(SIGKILL\) with \d+ of 200 events in the inbox/);
  });

  it("inbox: saves at stop the proofs whose ACK was not confirmed, and ACKs with them when it starts again (§7)", async () => {
    // A 30 s lease (the default): nothing is re-sent meanwhile, so what ACKs is the saved proof.
    const longLease = await startNode(db.url);
    const proxy = await startProxy(longLease.port);
    const cred = await bootstrap(db.url, {
      namespace: "inbox-proofs",
      application: "app",
      queues: ["q"],
      eventAccess: true,
    });
    const api = client(longLease.url, cred.token);
    const q = cred.queues[0]!.id;
    const sub = (await api.post("/v1/subscriptions", { name: "inbox", queue_id: q })).json.data.subscription
      .id as string;
    const inboxName = `orbit_t_inbox_proofs_${process.pid}`;
    const inbox = await mysql.createConnection({ uri: MYSQL_SERVER });
    /** A number the inbox database holds (0 while the consumer has not made its tables yet). */
    const inboxNumber = (sql: string, params: unknown[] = []) =>
      inbox.query(sql, params).then(
        ([rows]) => Number((rows as { n: number }[])[0]!.n),
        () => 0,
      );
    const proofsSaved = () =>
      inboxNumber(`SELECT COUNT(*) AS n FROM \`${inboxName}\`.unconfirmed_proofs WHERE subscription_id = ?`, [sub]);
    const states = async () =>
      (await db.query("SELECT state, lease_epoch, attempts FROM deliveries WHERE subscription_id = ?", [sub])).map(
        (r) => `${r.state} ${r.lease_epoch} ${r.attempts}`,
      );
    const start = (url: string) => {
      const child = spawn(process.execPath, [INBOX_CONSUMER], {
        env: {
          ...process.env,
          ORBIT_URL: url,
          ORBIT_TOKEN: cred.token,
          SUBSCRIPTION_ID: sub,
          INBOX_DATABASE_URL: `${MYSQL_SERVER}/${inboxName}`,
          CAPACITY: "8",
        },
      });
      let out = "";
      child.stdout.on("data", (d: Buffer) => (out += d.toString()));
      child.stderr.on("data", (d: Buffer) => (out += d.toString()));
      const exited = once(child, "exit") as Promise<[number | null, string | null]>;
      return { child, exited, out: () => out };
    };
    try {
      proxy.muteClientWhen("event.ack"); // the ACKs never reach the node: unconfirmed at stop
      const first = start(proxy.url);
      await cancelledResults(api, q, 3);
      await until(
        async () =>
          (await states()).length === 3 &&
          (await inboxNumber(`SELECT COUNT(*) AS n FROM \`${inboxName}\`.inbox`)) === 3,
      );
      first.child.kill("SIGTERM");
      assert.deepEqual((await first.exited)[0], 0, first.out());
      assert.deepEqual(await states(), ["LEASED 1 1", "LEASED 1 1", "LEASED 1 1"], "their ACKs never arrived");
      assert.equal(await proofsSaved(), 3, "saved at stop");
      // A saved proof no delivery has (it could be one replaced meanwhile): DELIVERY_LEASE_LOST, dropped.
      await inbox.query(`INSERT INTO \`${inboxName}\`.unconfirmed_proofs VALUES (?, ?, '1', ?)`, [
        sub,
        "0".repeat(32),
        "A".repeat(43),
      ]);

      const second = start(longLease.url);
      await until(async () => (await states()).every((x) => x.startsWith("ACKED")));
      assert.deepEqual(
        await states(),
        ["ACKED 1 1", "ACKED 1 1", "ACKED 1 1"],
        "ACKed with the saved proofs: no re-send, no attempt spent",
      );
      second.child.kill("SIGTERM");
      assert.equal((await second.exited)[0], 0, second.out());
      assert.doesNotMatch(second.out(), /applied|duplicate/, "nothing was delivered again");
      assert.equal(second.out().match(/^ACK confirmed [0-9a-f]{32} epoch 1$/gm)?.length, 3, second.out());
      assert.equal(await proofsSaved(), 0, "confirmed or dead, none kept");
      assert.equal(await inboxNumber(`SELECT SUM(n) AS n FROM \`${inboxName}\`.outcome_totals`), 3, "each effect once");
    } finally {
      await inbox.query(`DROP DATABASE IF EXISTS \`${inboxName}\``);
      await inbox.end();
      await proxy.close();
      await longLease.stop();
    }
  });

  it("inbox: exits 1, not waits for ever, when a saved proof is malformed, and keeps the row", async () => {
    const cred = await bootstrap(db.url, {
      namespace: "inbox-bad-proof",
      application: "app",
      queues: ["q"],
      eventAccess: true,
    });
    const sub = (
      await client(node.url, cred.token).post("/v1/subscriptions", { name: "inbox", queue_id: cred.queues[0]!.id })
    ).json.data.subscription.id as string;
    const inboxName = `orbit_t_inbox_bad_${process.pid}`;
    const inbox = await mysql.createConnection({ uri: MYSQL_SERVER });
    try {
      await inbox.query(`CREATE DATABASE \`${inboxName}\``);
      await inbox.query(`CREATE TABLE \`${inboxName}\`.unconfirmed_proofs (subscription_id CHAR(32) NOT NULL, delivery_id CHAR(32) NOT NULL,
        epoch VARCHAR(20) NOT NULL, lease_secret CHAR(43) NOT NULL, PRIMARY KEY (subscription_id, delivery_id)) ENGINE = InnoDB`);
      // Edited by hand: a lease secret no delivery could have had.
      await inbox.query(`INSERT INTO \`${inboxName}\`.unconfirmed_proofs VALUES (?, ?, '1', 'not a secret')`, [
        sub,
        "0".repeat(32),
      ]);
      const r = await new Promise<{ code: number | null; killed: boolean; out: string }>((resolve) => {
        const childEnv = {
          ...process.env,
          ORBIT_URL: node.url,
          ORBIT_TOKEN: cred.token,
          SUBSCRIPTION_ID: sub,
          INBOX_DATABASE_URL: `${MYSQL_SERVER}/${inboxName}`,
        };
        execFile(process.execPath, [INBOX_CONSUMER], { env: childEnv, timeout: 20000 }, (err, stdout, stderr) => {
          const e = err as (Error & { code?: number; killed?: boolean }) | null;
          resolve({
            code: e ? (typeof e.code === "number" ? e.code : null) : 0,
            killed: Boolean(e?.killed),
            out: stdout + stderr,
          });
        });
      });
      assert.equal(r.killed, false, `still running after 20 s: ${r.out}`);
      assert.equal(r.code, 1, r.out);
      assert.match(r.out, /proofs must be \{delivery_id, epoch, lease_secret\}/);
      const [rows] = await inbox.query(`SELECT lease_secret FROM \`${inboxName}\`.unconfirmed_proofs`);
      assert.deepEqual(rows, [{ lease_secret: "not a secret" }], "the row is kept for an operator to read");
    } finally {
      await inbox.query(`DROP DATABASE IF EXISTS \`${inboxName}\``);
      await inbox.end();
    }
  });

  it("inbox: killed halfway, every event is applied once", async () => {
    const r = await run("example:inbox", { ...env, RESULTS: "20" });
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /killed the consumer with SIGKILL/);
    assert.match(r.out, /inbox: 20 events; effects applied: 20/);
    assert.match(r.out, /deliveries ACKED: 20 of 20/);
  });
});

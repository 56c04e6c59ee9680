// Identity over real HTTP: `orbit bootstrap` output, token authentication (401), action
// checks (403) and revocation, against a real `orbit serve` and MariaDB.
import { strict as assert } from "node:assert";
import { freshDatabase, MYSQL_PORT, type TestDatabase } from "../helpers/db.js";
import { bootstrap, runCli, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { request } from "../helpers/http.js";
import { client } from "../helpers/api.js";
import { startProxy } from "../helpers/proxy.js";
import { assertContract, assertError } from "../helpers/contract.js";

const ID = "0123456789abcdef0123456789abcdef";

describe("identity: bootstrap, 401, 403", () => {
  let db: TestDatabase;
  let node: OrbitNode;
  let full: BootstrapOutput;
  let tasksOnly: BootstrapOutput;

  before(async () => {
    db = await freshDatabase("identity");
    full = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q", "q2"], eventAccess: true });
    tasksOnly = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"] });
    node = await startNode(db.url);
  });
  after(async () => {
    await node?.stop();
    await db?.drop();
  });

  it("bootstrap --json prints exactly the documented object", () => {
    assert.deepEqual(Object.keys(full).sort(), [
      "actions",
      "application_id",
      "credential_id",
      "namespace_id",
      "queues",
      "token",
    ]);
    for (const id of [full.namespace_id, full.application_id, full.credential_id]) assert.match(id, /^[0-9a-f]{32}$/);
    assert.match(full.token, new RegExp(`^orbit_${full.credential_id}_[A-Za-z0-9_-]{43}$`));
    assert.deepEqual(
      full.queues.map((q) => q.name),
      ["q", "q2"],
    );
    assert.deepEqual([...full.actions].sort(), [
      "events:consume",
      "events:manage",
      "events:read",
      "tasks:cancel",
      "tasks:read",
      "tasks:review",
      "tasks:submit",
      "tasks:work",
    ]);
  });

  it("bootstrap reuses existing names and always issues a new credential", () => {
    assert.equal(tasksOnly.namespace_id, full.namespace_id);
    assert.equal(tasksOnly.application_id, full.application_id);
    assert.equal(tasksOnly.queues[0]!.id, full.queues[0]!.id);
    assert.notEqual(tasksOnly.credential_id, full.credential_id);
    assert.ok(
      tasksOnly.actions.every((a) => a.startsWith("tasks:")),
      "no event actions without --event-access",
    );
  });

  it("stores only a digest of the secret", async () => {
    const c = await db.connect();
    try {
      const [rows] = await c.query<any[]>("SELECT * FROM credentials WHERE id = ?", [full.credential_id]);
      const secret = full.token.slice(-43);
      const stored = JSON.stringify(rows[0], (_k, v) =>
        v?.type === "Buffer" ? Buffer.from(v.data).toString("base64url") : v,
      );
      assert.ok(!stored.includes(secret), "the secret is not stored");
      assert.equal(rows[0].secret_digest.length, 32);
    } finally {
      await c.end();
    }
  });

  it("a token authenticates: the caller is resolved from the token alone", async () => {
    const res = await request(node.url, { path: "/v1/credential", token: full.token });
    assert.equal(res.status, 200, res.text);
    assertContract("getCurrentCredential", res);
    assert.match(String(res.headers["content-type"]), /^application\/json/);
    assert.deepEqual(res.json.data, {
      namespace_id: full.namespace_id,
      application_id: full.application_id,
      credential_id: full.credential_id,
      actions: [...full.actions].sort(),
      queues: full.queues,
    });
  });

  it("lists the queue scope by UTF-16 code unit, whatever the node's locale", async () => {
    // Names a locale orders differently: upper case, '-' and '_' (ICU puts "a_b" before "a-b").
    const names = ["a_b", "alpha", "Zed", "a-b"];
    const many = await bootstrap(db.url, { namespace: "ns", application: "app", queues: names });
    const res = await request(node.url, { path: "/v1/credential", token: many.token });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(
      res.json.data.queues.map((q: { name: string }) => q.name),
      ["Zed", "a-b", "a_b", "alpha"],
    );
  });

  it("a missing, malformed, tampered or unknown token gets 401 in the envelope", async () => {
    const secret = full.token.slice(-43);
    const flipped = (secret[0] === "A" ? "B" : "A") + secret.slice(1);
    // The same 32 bytes spelled otherwise: the last of 43 characters carries 4 bits and 2
    // unused ones; set the lowest, and a lenient decoder gives back the issued secret.
    const B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const nonCanonical = secret.slice(0, -1) + B64URL[B64URL.indexOf(secret.at(-1)!) ^ 1]!;
    assert.deepEqual(Buffer.from(nonCanonical, "base64url"), Buffer.from(secret, "base64url"));
    const cases: [string, [string, string][]][] = [
      ["no header", []],
      ["tampered secret", [["Authorization", `Bearer orbit_${full.credential_id}_${flipped}`]]],
      ["non-canonical secret", [["Authorization", `Bearer orbit_${full.credential_id}_${nonCanonical}`]]],
      ["unknown credential", [["Authorization", `Bearer orbit_${ID}_${secret}`]]],
      ["other credential's secret", [["Authorization", `Bearer orbit_${tasksOnly.credential_id}_${secret}`]]],
      ["wrong scheme", [["Authorization", `Basic ${full.token}`]]],
      ["truncated", [["Authorization", `Bearer ${full.token.slice(0, -1)}`]]],
      [
        "repeated header",
        [
          ["Authorization", `Bearer ${full.token}`],
          ["Authorization", `Bearer ${full.token}`],
        ],
      ],
    ];
    for (const [what, headers] of cases) {
      const res = await request(node.url, { path: "/v1/credential", headers });
      assertError(res, 401, "UNAUTHENTICATED");
      assertContract("getCurrentCredential", res);
      assert.ok(!res.text.includes(secret), `${what}: no secret echoed`);
    }
  });

  it("a valid token without the action gets 403, even for a resource it cannot see", async () => {
    const res = await request(node.url, { path: `/v1/subscriptions/${ID}`, token: tasksOnly.token });
    assertError(res, 403, "PERMISSION_DENIED");
    assertContract("getSubscription", res);
    const consume = await request(node.url, { path: "/v1/events/connect", token: tasksOnly.token });
    assertError(consume, 403, "PERMISSION_DENIED");
  });

  it("a token with the action passes authentication and the action check", async () => {
    const res = await request(node.url, { path: `/v1/subscriptions/${ID}`, token: full.token });
    assert.notEqual(res.status, 401);
    assert.notEqual(res.status, 403);
  });

  it("a revoked credential gets 401 from then on", async () => {
    const extra = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"] });
    const before = await request(node.url, { path: "/v1/credential", token: extra.token });
    assert.equal(before.status, 200);
    const res = await runCli(["revoke", "--credential", extra.credential_id], { ORBIT_DATABASE_URL: db.url });
    assert.equal(res.code, 0, res.stderr);
    const after = await request(node.url, { path: "/v1/credential", token: extra.token });
    assertError(after, 401, "UNAUTHENTICATED");
    const again = await runCli(["revoke", "--credential", extra.credential_id], { ORBIT_DATABASE_URL: db.url });
    assert.equal(again.code, 1, "revoking twice reports that nothing was active");
  });

  it("resolves concurrent requests of several credentials each to its own caller", async () => {
    // Under load their lookups are shared (one statement for several credentials).
    const secret = full.token.slice(-43);
    const tokens = [full.token, tasksOnly.token, `orbit_${ID}_${secret}`, `orbit_${tasksOnly.credential_id}_${secret}`];
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        request(node.url, { path: "/v1/credential", token: tokens[i % tokens.length]! }),
      ),
    );
    answers.forEach((res, i) => {
      if (i % 4 === 0) assert.equal(res.json.data.credential_id, full.credential_id);
      else if (i % 4 === 1)
        assert.deepEqual([res.json.data.credential_id, res.json.data.queues.length], [tasksOnly.credential_id, 1]);
      else assertError(res, 401, "UNAUTHENTICATED");
    });
  });

  it("refuses a request that arrives after the revocation, while an earlier lookup of the credential is in flight", async () => {
    // Requests share credential lookups under load (credential-lookups.ts), but only
    // lookups that start after they arrived. A node of its own behind a proxy that holds
    // the database's answers back: the first lookup ran before the revocation, its
    // answer arrives after it.
    const extra = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"] });
    const proxy = await startProxy(MYSQL_PORT);
    const own = await startNode(db.urlVia(proxy));
    try {
      assert.equal(
        (await request(own.url, { path: "/v1/credential", token: extra.token })).status,
        200,
        "warm: a pooled connection is open",
      );
      proxy.hold();
      const sent = proxy.chunksFromClients;
      const first = request(own.url, { path: "/v1/credential", token: extra.token });
      while (proxy.chunksFromClients === sent) await new Promise((r) => setTimeout(r, 5));
      await new Promise((r) => setTimeout(r, 100)); // the lookup has run; its answer is held
      const res = await runCli(["revoke", "--credential", extra.credential_id], { ORBIT_DATABASE_URL: db.url });
      assert.equal(res.code, 0, res.stderr);
      const second = request(own.url, { path: "/v1/credential", token: extra.token });
      await new Promise((r) => setTimeout(r, 200));
      proxy.release();
      assert.equal((await first).status, 200, "it arrived before the revocation");
      assertError(await second, 401, "UNAUTHENTICATED");
    } finally {
      proxy.release();
      await own.stop();
      await proxy.close();
    }
  });

  it("bootstrap refuses bad names and writes nothing", async () => {
    const c = await db.connect();
    try {
      const count = async () =>
        Number(((await c.query<any[]>("SELECT COUNT(*) AS n FROM credentials"))[0] as any[])[0].n);
      const n0 = await count();
      for (const args of [
        ["--namespace", "-bad", "--application", "app", "--queue", "q"],
        ["--namespace", "ns", "--application", "a b", "--queue", "q"],
        ["--namespace", "ns", "--application", "app", "--queue", "x".repeat(129)],
        ["--namespace", "ns", "--application", "app"],
        ["--namespace", "ns", "--application", "app", "--queue", "q", "--queue", "q"],
        ["--namespace", "ns", "--application", "app", "--queue", "q", "--bogus"],
      ]) {
        const res = await runCli(["bootstrap", ...args], { ORBIT_DATABASE_URL: db.url });
        assert.equal(res.code, 2, `${args.join(" ")}: ${res.stderr}`);
        assert.match(res.stderr, /orbit bootstrap:/);
      }
      assert.equal(await count(), n0, "no credential was created");
    } finally {
      await c.end();
    }
  });

  it("checks the queue a body names before the body: an invalid body naming a queue outside the scope is 404 and writes nothing", async () => {
    const elsewhere = (
      await bootstrap(db.url, { namespace: "ns2", application: "app", queues: ["q"], eventAccess: true })
    ).queues[0]!.id;
    const own = full.queues[0]!.id;
    const api = client(node.url, full.token);
    // Each body breaks one rule that has nothing to do with its queue.
    const invalid = {
      submit: (queue_id: unknown) => api.post("/v1/tasks", { queue_id, input: 1, priority: 1 }),
      claim: (queue_id: unknown) => api.post("/v1/worker/claim", { queue_id, wait_ms: -1 }, null),
      create: (queue_id: unknown) => api.post("/v1/subscriptions", { name: "s", queue_id, max_pending: 1001 }),
    };
    const written = async () =>
      (await db.query("SELECT (SELECT COUNT(*) FROM tasks) AS t, (SELECT COUNT(*) FROM subscriptions) AS s"))[0];
    const before = await written();
    for (const [op, send] of Object.entries(invalid)) {
      for (const q of [elsewhere, ID]) assertError(await send(q), 404, "NOT_FOUND");
      // A queue in the scope, or no well-formed queue id at all: the body's fault.
      for (const q of [own, "not-a-queue", ID.toUpperCase(), 7]) {
        const res = await send(q);
        assert.equal(res.json?.error?.code, "INVALID_ARGUMENT", `${op} ${JSON.stringify(q)}: ${res.text}`);
        assertError(res, 400, "INVALID_ARGUMENT");
      }
    }
    assert.deepEqual(await written(), before, "nothing written");
  });

  it("the token never appears in the node's log", () => {
    const all = node.lines.join("\n");
    for (const t of [full.token, tasksOnly.token]) assert.ok(!all.includes(t.slice(-43)));
  });
});

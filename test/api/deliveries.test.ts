// Delivery history, detail and manual retry over real HTTP (docs/protocol.md §4), and the
// usage fields of §2. Deliveries are brought into each state by the delivery engine itself
// (materialise, claim, ACK, lease recovery) against the same real database, the way the
// WebSocket layer drives it.
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, runCli, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, waitSequenced, type Client } from "../helpers/api.js";
import { assertContract, assertError } from "../helpers/contract.js";
import { queueWithSubscription } from "../helpers/fixtures.js";
import { createPool, type Pool } from "../../src/db/pool.js";
import { ack } from "../../src/domain/delivery-acks.js";
import { claim, ENGINE_SESSION, type Lease } from "../../src/domain/delivery-engine.js";
import { SESSION_LEASES_SQL, claimableStatement } from "../../src/db/queries/deliveries.js";
import { refreshDatabaseGauges } from "../../src/domain/usage-metrics.js";
import { AckBatcher } from "../../src/ws/ack-batcher.js";
import { oldestPendingAge } from "../../src/metrics.js";

const ID = "0123456789abcdef0123456789abcdef";
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("deliveries", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let node: OrbitNode;
  let cred: BootstrapOutput;
  let api: Client;
  let pool: Pool;
  let claimPool: Pool;
  let q: string;

  async function results(count: number): Promise<void> {
    for (let i = 0; i < count; i++) {
      const t = (await api.post("/v1/tasks", { queue_id: q, input: { secret_input: i } })).json.data.task;
      await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" });
    }
    await waitSequenced(db, cred.namespace_id);
  }
  async function subscription(extra: Record<string, unknown> = {}) {
    const res = await api.post("/v1/subscriptions", {
      name: `s-${randomBytes(4).toString("hex")}`,
      queue_id: q,
      from_sequence: "0",
      ...extra,
    });
    assert.equal(res.status, 201, res.text);
    return res.json.data.subscription as { id: string; cursor_sequence: string; revision: string };
  }
  const session = (subscriptionId: string, capacity: number, leaseDurationMs = 60000) => ({
    subscriptionId,
    sessionId: randomBytes(16).toString("hex"),
    capacity,
    leaseDurationMs,
  });
  /** One connection's claim: the engine's claim with a single seat. */
  const claimOne = async (_: Pool, r: ReturnType<typeof session>) => {
    const out = await claim(claimPool, {
      subscriptionId: r.subscriptionId,
      leaseDurationMs: r.leaseDurationMs,
      seats: [{ sessionId: r.sessionId, capacity: r.capacity }],
    });
    return { paused: out.paused, ...out.seats[0]! };
  };
  const proof = (l: Lease) => ({
    deliveryId: l.delivery.id,
    epoch: l.delivery.lease_epoch,
    secret: Buffer.from(l.leaseSecret, "base64url"),
  });
  const who = (subscriptionId: string) => ({
    subscriptionId,
    namespaceId: cred.namespace_id,
    credentialId: cred.credential_id,
  });

  before(async () => {
    db = await freshDatabase("deliveries");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
    node = await startNode(db.url);
    api = client(node.url, cred.token);
    q = cred.queues[0]!.id;
    pool = createPool(db.url, 4);
    // Claims and ACKs run on a pool set up the way a node's engine pools are (ENGINE_SESSION).
    claimPool = createPool(db.url, 2, ENGINE_SESSION);
    await results(6);
  });
  after(async () => {
    await pool?.end();
    await claimPool?.end();
    await node?.stop();
    await db?.drop();
  });

  it("shows each state with exactly the fields of §4, and never a secret", async () => {
    const s = await subscription({ max_attempts: 1 });
    const leased = (await claimOne(pool, session(s.id, 3, 300))).leases;
    assert.equal(leased.length, 3);
    const [acked] = await ack(claimPool, who(s.id), [proof(leased[0]!)]);
    assert.ok(acked?.ok);
    const fresh = (await claimOne(pool, session(s.id, 1, 60000))).leases[0]!; // stays LEASED
    await sleep(400);
    // A later claim recovers the two expired leases: budget 1 is spent, so EXPIRED.
    const outcome = await claimOne(pool, session(s.id, 0));
    assert.equal(outcome.leases.length, 0);

    const list = await api.get(`/v1/subscriptions/${s.id}/deliveries?limit=100`);
    assert.equal(list.status, 200, list.text);
    assertContract("listEventDeliveries", list);
    const byState = new Map<string, any[]>();
    for (const d of list.json.data.items) byState.set(d.state, [...(byState.get(d.state) ?? []), d]);
    assert.deepEqual(
      ["PENDING", "LEASED", "ACKED", "EXPIRED"].map((st) => byState.get(st)?.length ?? 0),
      [2, 1, 1, 2],
    );
    const base = [
      "attempt_budget",
      "attempts",
      "available_at",
      "created_at",
      "event_id",
      "id",
      "lease_epoch",
      "revision",
      "sequence",
      "state",
      "subscription_id",
    ];
    for (const d of list.json.data.items) {
      const extra = d.state === "LEASED" ? ["lease_until"] : d.state === "ACKED" ? ["acknowledged_at"] : [];
      assert.deepEqual(Object.keys(d).sort(), [...base, ...extra].sort(), d.state);
    }
    assert.deepEqual(
      byState.get("PENDING")!.map((d) => [d.lease_epoch, d.attempts, d.revision]),
      [
        ["0", 0, "1"],
        ["0", 0, "1"],
      ],
    );
    assert.equal(byState.get("LEASED")![0].id, fresh.delivery.id);
    const ex = byState.get("EXPIRED")![0];
    assert.deepEqual(
      [ex.lease_epoch, ex.attempts, ex.attempt_budget, ex.revision],
      ["1", 1, 1, "3"],
      "claimed once (2), recovered (3)",
    );

    const detail = await api.get(`/v1/subscriptions/${s.id}/deliveries/${acked.deliveryId}`);
    assert.equal(detail.status, 200);
    assertContract("getEventDelivery", detail);
    assert.deepEqual(Object.keys(detail.json.data).sort(), ["delivery", "event"]);
    assert.equal(detail.json.data.delivery.state, "ACKED");
    assert.equal(detail.json.data.delivery.acknowledged_at, acked.acknowledgedAt);
    assert.equal(detail.json.data.event.id, detail.json.data.delivery.event_id);
    assert.equal(detail.json.data.event.type, "task.cancelled");
    for (const res of [list, detail]) {
      for (const leak of [
        "lease_secret",
        "digest",
        "session",
        "secret_input",
        leased[0]!.leaseSecret,
        fresh.leaseSecret,
      ]) {
        assert.ok(!res.text.includes(leak), `no ${leak} in a read`);
      }
    }
  });

  it("shows a worker's result event with its result, and never its input, error or the attempt's other content", async () => {
    // The cancelled events above carry no result; this one does, so every field an event
    // read could take from the task or the attempt is there to leak (docs/protocol.md §6:
    // details never carry task input; openapi.yaml: a worker's error is shown by no read).
    const { q: own, sub } = await queueWithSubscription(db, cred, api);
    const hidden = "request-content-no-read-shows";
    await api.post("/v1/tasks", { queue_id: own, input: { secret_input: hidden } });
    const a = (await api.post("/v1/worker/claim", { queue_id: own }, null)).json.data;
    const done = await api.post(
      `/v1/worker/attempts/${a.attempt_id}:complete`,
      { outcome: "failed", result: { n: 1 }, error: hidden },
      null,
    );
    assert.equal(done.status, 200, done.text);
    await waitSequenced(db, cred.namespace_id);
    const [leased] = (await claimOne(pool, session(sub, 1))).leases;
    const detail = await api.get(`/v1/subscriptions/${sub}/deliveries/${leased!.delivery.id}`);
    assertContract("getEventDelivery", detail);
    const e = detail.json.data.event;
    assert.deepEqual(e.details, { state: "FAILED", reason: "WORKER_FAILED" });
    assert.deepEqual(e.snapshot.result, '{"n":1}');
    assert.ok(!detail.text.includes(hidden), detail.text);
  });

  it("filters by state, pages newest first, and binds cursors to subscription and filter", async () => {
    const s = await subscription();
    await claimOne(pool, session(s.id, 2));
    const all: string[] = [];
    let cursor: string | undefined;
    do {
      const res = await api.get(`/v1/subscriptions/${s.id}/deliveries?limit=2${cursor ? `&cursor=${cursor}` : ""}`);
      assert.equal(res.status, 200, res.text);
      all.push(...res.json.data.items.map((d: any) => d.id));
      cursor = res.json.data.next_cursor;
    } while (cursor);
    assert.equal(all.length, 6);
    assert.equal(new Set(all).size, 6);
    const full = (await api.get(`/v1/subscriptions/${s.id}/deliveries`)).json.data.items;
    const order = [...full].sort((a: any, b: any) =>
      a.created_at === b.created_at ? (a.id < b.id ? 1 : -1) : a.created_at < b.created_at ? 1 : -1,
    );
    assert.deepEqual(
      full.map((d: any) => d.id),
      order.map((d: any) => d.id),
      "created_at DESC, id DESC",
    );
    const leased = await api.get(`/v1/subscriptions/${s.id}/deliveries?state=LEASED`);
    assert.equal(leased.json.data.items.length, 2);
    assert.ok(leased.json.data.items.every((d: any) => d.state === "LEASED"));
    const page1 = await api.get(`/v1/subscriptions/${s.id}/deliveries?state=PENDING&limit=1`);
    const c = page1.json.data.next_cursor;
    assert.ok(c);
    assert.equal((await api.get(`/v1/subscriptions/${s.id}/deliveries?state=PENDING&limit=1&cursor=${c}`)).status, 200);
    assertError(
      await api.get(`/v1/subscriptions/${s.id}/deliveries?state=LEASED&cursor=${c}`),
      400,
      "INVALID_ARGUMENT",
    );
    assertError(await api.get(`/v1/subscriptions/${s.id}/deliveries?cursor=${c}`), 400, "INVALID_ARGUMENT");
    const other = await subscription();
    assertError(
      await api.get(`/v1/subscriptions/${other.id}/deliveries?state=PENDING&cursor=${c}`),
      400,
      "INVALID_ARGUMENT",
    );
    for (const bad of ["state=leased", "state=", "limit=0", "limit=101", "state=ACKED&state=ACKED", "queue_id=" + q]) {
      assertError(await api.get(`/v1/subscriptions/${s.id}/deliveries?${bad}`), 400, "INVALID_ARGUMENT");
    }
  });

  it("pages every state, one delivery a page, in the unfiltered list's order (each state through the index that serves it)", async () => {
    const s = await subscription({ max_attempts: 1 });
    const leased = (await claimOne(pool, session(s.id, 3, 300))).leases;
    assert.ok((await ack(claimPool, who(s.id), [proof(leased[0]!)]))[0]?.ok);
    await claimOne(pool, session(s.id, 1, 60000)); // stays LEASED
    await sleep(400);
    await claimOne(pool, session(s.id, 0)); // the two short leases: EXPIRED
    const full = (await api.get(`/v1/subscriptions/${s.id}/deliveries?limit=100`)).json.data.items as {
      id: string;
      state: string;
    }[];
    assert.equal(full.length, 6);
    for (const state of ["PENDING", "LEASED", "ACKED", "EXPIRED"]) {
      const paged: string[] = [];
      let cursor: string | undefined;
      do {
        const res = await api.get(
          `/v1/subscriptions/${s.id}/deliveries?state=${state}&limit=1${cursor ? `&cursor=${cursor}` : ""}`,
        );
        assert.equal(res.status, 200, res.text);
        assert.ok(res.json.data.items.length <= 1);
        for (const d of res.json.data.items) assert.equal(d.state, state);
        paged.push(...res.json.data.items.map((d: { id: string }) => d.id));
        cursor = res.json.data.next_cursor;
      } while (cursor);
      const expected = full.filter((d) => d.state === state).map((d) => d.id);
      assert.ok(expected.length > 0, state);
      assert.deepEqual(paged, expected, state);
    }
  });

  it("never resolves a delivery under another subscription", async () => {
    const a = await subscription();
    const b = await subscription();
    const d = (await claimOne(pool, session(a.id, 1))).leases[0]!.delivery;
    assert.equal((await api.get(`/v1/subscriptions/${a.id}/deliveries/${d.id}`)).status, 200);
    assertError(await api.get(`/v1/subscriptions/${b.id}/deliveries/${d.id}`), 404, "NOT_FOUND");
    assertError(await api.get(`/v1/subscriptions/${a.id}/deliveries/${ID}`), 404, "NOT_FOUND");
    assertError(await api.get(`/v1/subscriptions/${a.id}/deliveries/${d.id.toUpperCase()}`), 404, "NOT_FOUND");
    assertError(
      await api.post(`/v1/subscriptions/${b.id}/deliveries/${d.id}:retry`, {
        expected_revision: d.revision,
        reason: "x",
        additional_attempts: 1,
      }),
      404,
      "NOT_FOUND",
    );
    // 404 before 400 (the order of checks): an unknown delivery is not found, whatever the body or key.
    for (const [body, key] of [
      [{}, undefined],
      [{ expected_revision: "1", reason: "x", additional_attempts: 1 }, null],
    ] as const) {
      assertError(await api.post(`/v1/subscriptions/${a.id}/deliveries/${ID}:retry`, body, key), 404, "NOT_FOUND");
      assertError(await api.post(`/v1/subscriptions/${b.id}/deliveries/${d.id}:retry`, body, key), 404, "NOT_FOUND");
    }
    assertError(await api.post(`/v1/subscriptions/${a.id}/deliveries/${d.id}:retry`, {}), 400, "INVALID_ARGUMENT");
  });

  it("answers the owner NOT_FOUND on every subscription operation once the queue is outside its scope", async () => {
    // docs/protocol.md §1: besides the action permission, every operation checks the queue
    // scope and the subscription's owner — the owner's too. No API narrows a
    // credential, so its queue scope is narrowed by hand (the credential keeps another queue).
    const scoped = await bootstrap(db.url, {
      namespace: "ns",
      application: "app",
      queues: ["q", "scope-other"],
      eventAccess: true,
    });
    const api2 = client(node.url, scoped.token);
    const res = await api2.post("/v1/subscriptions", {
      name: `s-${randomBytes(4).toString("hex")}`,
      queue_id: q,
      from_sequence: "0",
    });
    assert.equal(res.status, 201, res.text);
    const sid = res.json.data.subscription.id as string;
    const d = (await claimOne(pool, session(sid, 1))).leases[0]!.delivery;
    const base = `/v1/subscriptions/${sid}`;
    const calls = () => [
      api2.get(base),
      api2.post(`${base}:configure`, { expected_revision: "1", enabled: false, reason: "out of scope" }),
      api2.get(`${base}/deliveries`),
      api2.get(`${base}/deliveries/${d.id}`),
      api2.post(`${base}/deliveries/${d.id}:retry`, {
        expected_revision: d.revision,
        reason: "out of scope",
        additional_attempts: 1,
      }),
      api2.get(`/v1/subscriptions?queue_id=${q}`),
    ];
    const c = await db.connect();
    try {
      await c.query("DELETE FROM credential_queues WHERE credential_id = ? AND queue_id = ?", [
        scoped.credential_id,
        q,
      ]);
      for (const call of calls()) assertError(await call, 404, "NOT_FOUND");
      await c.query("INSERT INTO credential_queues (credential_id, queue_id) VALUES (?, ?)", [scoped.credential_id, q]);
    } finally {
      await c.end();
    }
    // The queue back in scope: the same reads answer, and nothing was changed meanwhile.
    const back = await api2.get(base);
    assert.equal(back.status, 200, back.text);
    assert.deepEqual([back.json.data.revision, back.json.data.enabled], ["1", true]);
    assert.equal((await api2.get(`${base}/deliveries/${d.id}`)).json.data.delivery.revision, d.revision);
  });

  it("retries only EXPIRED deliveries: PENDING again with more budget, nothing reset, audited, replay adds nothing", async () => {
    const s = await subscription({ max_attempts: 1, max_pending: 1 });
    const first = (await claimOne(pool, session(s.id, 1, 200))).leases[0]!;
    const path = `/v1/subscriptions/${s.id}/deliveries/${first.delivery.id}:retry`;
    assertError(
      await api.post(path, { expected_revision: first.delivery.revision, reason: "early", additional_attempts: 1 }),
      409,
      "STATE_CONFLICT",
    );
    await sleep(300);
    await claimOne(pool, session(s.id, 1)); // recovers: budget spent → EXPIRED
    const expired = (await api.get(`/v1/subscriptions/${s.id}/deliveries/${first.delivery.id}`)).json.data.delivery;
    assert.equal(expired.state, "EXPIRED");
    const sub = (await api.get(`/v1/subscriptions/${s.id}`)).json.data;
    assert.equal(sub.pending_count, 1, "EXPIRED still occupies the backlog");
    for (const body of [
      { expected_revision: expired.revision, reason: "x", additional_attempts: 0 },
      { expected_revision: expired.revision, reason: "x", additional_attempts: 101 },
      { expected_revision: expired.revision, reason: "", additional_attempts: 1 },
      { expected_revision: expired.revision, additional_attempts: 1 },
      { expected_revision: expired.revision, reason: "x", additional_attempts: 1, attempts: 0 },
    ]) {
      assertError(await api.post(path, body), 400, "INVALID_ARGUMENT");
    }
    assertError(
      await api.post(path, { expected_revision: "1", reason: "x", additional_attempts: 1 }),
      409,
      "STATE_CONFLICT",
    );
    const body = {
      expected_revision: expired.revision,
      reason: "receiver persistence failure repaired",
      additional_attempts: 2,
    };
    const retriedFrom = Date.now();
    const res = await api.post(path, body, "retry-1");
    assert.equal(res.status, 200, res.text);
    assertContract("retryEventDelivery", res);
    const d = res.json.data.delivery;
    assert.equal(res.json.data.deduplicated, false);
    assert.equal(d.state, "PENDING");
    assert.equal(d.attempt_budget, 3);
    assert.equal(d.attempts, expired.attempts, "attempts are not reset");
    assert.equal(d.lease_epoch, expired.lease_epoch, "the epoch is not reset");
    assert.equal(d.id, expired.id);
    assert.equal(d.event_id, expired.event_id);
    assert.equal(d.revision, (BigInt(expired.revision) + 1n).toString());
    assert.equal(d.created_at, expired.created_at);
    // available_at is the earliest time it may be re-sent (protocol §4): EXPIRED, it could
    // not be re-sent before the retry.
    assert.ok(
      Date.parse(d.available_at) >= retriedFrom,
      `available_at ${d.available_at} is the retry's time, not the last recovery's (${expired.available_at})`,
    );
    const replay = await api.post(path, body, "retry-1");
    assert.equal(replay.status, 200);
    assert.equal(replay.json.data.deduplicated, true);
    assert.deepEqual(replay.json.data.delivery, d);
    assert.equal(
      (await api.get(`/v1/subscriptions/${s.id}/deliveries/${d.id}`)).json.data.delivery.attempt_budget,
      3,
      "the replay added nothing",
    );
    assertError(await api.post(path, { ...body, additional_attempts: 3 }, "retry-1"), 409, "IDEMPOTENCY_CONFLICT");
    // Written differently, meaning the same (2.0 is 2, keys in another order): a replay.
    const respelled = `{"reason":${JSON.stringify(body.reason)},"additional_attempts":${body.additional_attempts}.0,"expected_revision":"${body.expected_revision}"}`;
    const respelledReplay = await api.post(path, respelled, "retry-1");
    assert.equal(respelledReplay.status, 200, respelledReplay.text);
    assert.equal(respelledReplay.json.data.deduplicated, true);
    // The same key and body on another delivery is other content (the path target is part of
    // it): 409, never the first delivery's receipt, and that delivery is left alone.
    // Created with the retry's key: keys are scoped to their operation kind.
    const created2 = await api.post(
      "/v1/subscriptions",
      { name: `s-${randomBytes(4).toString("hex")}`, queue_id: q, from_sequence: "0", max_pending: 1 },
      "retry-1",
    );
    assert.equal(created2.status, 201, created2.text);
    const s2 = created2.json.data.subscription as { id: string };
    await claimOne(pool, session(s2.id, 0)); // materialises one PENDING delivery
    const [other] = (await api.get(`/v1/subscriptions/${s2.id}/deliveries`)).json.data.items;
    assertError(
      await api.post(`/v1/subscriptions/${s2.id}/deliveries/${other.id}:retry`, body, "retry-1"),
      409,
      "IDEMPOTENCY_CONFLICT",
    );
    assert.deepEqual((await api.get(`/v1/subscriptions/${s2.id}/deliveries/${other.id}`)).json.data.delivery, other);
    const c0 = await db.connect();
    try {
      // The claimable rows are read as `lease_until IS NULL` (migrations/000018): no PENDING row may keep one.
      const [stray] = await c0.query<any[]>(
        "SELECT COUNT(*) AS n FROM deliveries WHERE state = 'PENDING' AND lease_until IS NOT NULL",
      );
      assert.equal(Number(stray[0].n), 0);
    } finally {
      await c0.end();
    }
    // Protocol §4: only an EXPIRED delivery may be retried, with its current revision:
    // PENDING (retried) and ACKED are 409 and stay as they are.
    const refuseRetry = async (state: string, key: string) => {
      const now = (await api.get(`/v1/subscriptions/${s.id}/deliveries/${d.id}`)).json.data.delivery;
      assert.equal(now.state, state);
      assertError(
        await api.post(path, { expected_revision: now.revision, reason: "not expired", additional_attempts: 1 }, key),
        409,
        "STATE_CONFLICT",
      );
      assert.deepEqual(
        (await api.get(`/v1/subscriptions/${s.id}/deliveries/${d.id}`)).json.data.delivery,
        now,
        `a ${state} delivery is left as it was`,
      );
    };
    await refuseRetry("PENDING", "retry-pending");
    // The retried delivery is claimed again with a new epoch.
    const again = (await claimOne(pool, session(s.id, 1))).leases[0]!;
    assert.equal(again.delivery.id, d.id);
    assert.equal(again.delivery.lease_epoch, "2");
    assert.equal(again.delivery.attempts, 2);
    assert.ok((await ack(claimPool, who(s.id), [proof(again)]))[0]?.ok);
    await refuseRetry("ACKED", "retry-acked");
    assert.equal(
      (await api.get(`/v1/subscriptions/${s.id}`)).json.data.pending_count,
      0,
      "ACKED, and no retry brought it back",
    );
    const c = await db.connect();
    try {
      const [rows] = await c.query<any[]>(
        "SELECT action, reason, details, revision_before, revision_after FROM audit_records WHERE delivery_id = ? AND action = 'delivery.retry'",
        [d.id],
      );
      assert.equal(rows.length, 1, "one audit record, not two");
      assert.equal(rows[0].reason, "receiver persistence failure repaired");
      assert.equal(JSON.parse(rows[0].details).additional_attempts, 2);
      assert.deepEqual(
        [String(rows[0].revision_before), String(rows[0].revision_after)],
        [expired.revision, d.revision],
      );
    } finally {
      await c.end();
    }
  });

  it("reads the claimable rows in sequence order straight from deliveries_state, without sorting them", async () => {
    const s = await subscription();
    const st = claimableStatement(s.id, 32);
    const c = await db.connect();
    try {
      const [plan] = await c.query<any[]>(`EXPLAIN ${st.sql}`, [...st.params] as any[]);
      const d = plan.find((r) => r.table === "d");
      assert.equal(d.key, "deliveries_state");
      assert.doesNotMatch(String(d.Extra), /filesort|temporary/);
    } finally {
      await c.end();
    }
  });

  it("reads a session's leases from the subscription's LEASED entries of deliveries_state alone", async () => {
    const s = await subscription();
    const c = await db.connect();
    try {
      const [plan] = await c.query<any[]>(`EXPLAIN ${SESSION_LEASES_SQL}`, [s.id, "0".repeat(32)]);
      assert.equal(plan.length, 1);
      assert.equal(plan[0].key, "deliveries_state");
      assert.equal(plan[0].type, "ref");
      assert.match(String(plan[0].Extra), /Using index/);
    } finally {
      await c.end();
    }
  });

  it("leases at once what a node whose clock runs 2 s ahead materialised", async () => {
    const s = await subscription();
    const realNow = Date.now;
    try {
      Date.now = () => realNow() + 2000; // node A: materialises all 6, leases 1
      assert.equal((await claimOne(pool, session(s.id, 1))).leases.length, 1);
    } finally {
      Date.now = realNow;
    }
    // node B, on time: the 5 PENDING rows (available_at 2 s ahead of it) are its to lease.
    assert.equal((await claimOne(pool, session(s.id, 8))).leases.length, 5);
  });

  it("ages the oldest PENDING delivery by the node's clock, not the database's", async () => {
    const s = await subscription();
    await claimOne(pool, session(s.id, 0)); // materialises 6 PENDING, available now
    const skewed = createPool(db.url, 1); // a database whose clock runs an hour ahead
    skewed.on("connection", (c) => c.query("SET SESSION timestamp = UNIX_TIMESTAMP(NOW(6)) + 3600"));
    try {
      await refreshDatabaseGauges(skewed);
    } finally {
      await skewed.end();
    }
    const age = (await oldestPendingAge.get()).values.find((v) => v.labels.subscription_id === s.id)!.value;
    assert.ok(age >= 0 && age < 60, `age ${age} s`);
  });

  it("leases the rest, and sends only what it leased, when a late ACK wins a row during the claim", async () => {
    const s = await subscription({ max_pending: 2, max_attempts: 5 });
    const first = (await claimOne(pool, session(s.id, 2, 150))).leases;
    assert.equal(first.length, 2);
    await sleep(250);
    await claimOne(pool, session(s.id, 0)); // recovers both: PENDING again, epoch kept
    const [won, other] = first.map((l) => l.delivery.id) as [string, string];
    // A connection holds `won`'s row lock, so the next claim's lease waits on it after the
    // claim has read both rows as PENDING; meanwhile the latest proof ACKs `won` there.
    const x = await db.connect();
    try {
      await x.query("START TRANSACTION");
      await x.query("SELECT id FROM deliveries WHERE id = ? FOR UPDATE", [won]);
      const seat = session(s.id, 2);
      const claiming = claimOne(pool, seat);
      // Wait until the claim's lease UPDATE is running, held up by that lock.
      for (let i = 0; i < 500; i++) {
        const [waiting] = await pool.query<any[]>(
          "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE info LIKE 'UPDATE deliveries%SET state = ''LEASED''%'",
        );
        if (Number(waiting[0].n) > 0) break;
        await sleep(10);
      }
      await x.query(
        "UPDATE deliveries SET state = 'ACKED', acknowledged_at = UTC_TIMESTAMP(3), lease_until = NULL, session_id = NULL, revision = revision + 1 WHERE id = ?",
        [won],
      );
      await x.query("COMMIT");
      const out = await claiming;
      assert.deepEqual(
        out.leases.map((l) => l.delivery.id),
        [other],
        "only the row it leased is sent",
      );
      assert.equal(out.held, 1);
      const [rows] = await x.query<any[]>(
        "SELECT id, state, session_id, lease_epoch FROM deliveries WHERE id IN (?, ?) ORDER BY id = ?",
        [won, other, won],
      );
      assert.deepEqual(
        rows.map((r) => [r.id, r.state, r.session_id, String(r.lease_epoch)]),
        [
          [other, "LEASED", seat.sessionId, "2"],
          [won, "ACKED", null, "1"],
        ],
      );
      const [again] = await ack(claimPool, who(s.id), [proof(out.leases[0]!)]);
      assert.ok(again?.ok, "the lease sent is a valid one");
    } finally {
      await x.query("ROLLBACK").catch(() => undefined);
      await x.end();
    }
  });

  it("takes a late ACK of the latest proof after its lease ran out and a claim made it PENDING again, before any re-send", async () => {
    // Protocol §6: after the lease runs out, the latest proof may still ACK late as long as
    // no new epoch has replaced it — also once recovery made it PENDING: only a new send (a
    // new epoch) replaces the proof.
    const s = await subscription({ max_pending: 1, max_attempts: 5 });
    const [l] = (await claimOne(pool, session(s.id, 1, 150))).leases;
    assert.ok(l);
    await sleep(250);
    await claimOne(pool, session(s.id, 0)); // recovers it: PENDING again, epoch 1 kept, nothing sent
    const path = `/v1/subscriptions/${s.id}/deliveries/${l.delivery.id}`;
    const recovered = (await api.get(path)).json.data.delivery;
    assert.deepEqual([recovered.state, recovered.lease_epoch], ["PENDING", "1"]);
    const [late] = await ack(claimPool, who(s.id), [proof(l)]);
    assert.ok(late?.ok && !late.deduplicated, JSON.stringify(late));
    const acked = (await api.get(path)).json.data.delivery;
    assert.deepEqual([acked.state, acked.lease_epoch, acked.attempts], ["ACKED", "1", 1]);
    const next = await claimOne(pool, session(s.id, 1));
    assert.ok(!next.leases.some((x) => x.delivery.id === l.delivery.id), "an ACKED delivery is not sent again");
  });

  it("counts a connection's lease that ran out as no longer held: the claim that recovers it re-sends it to that connection", async () => {
    // The held count must not be read before the claim's own recovery: a connection at
    // capacity whose lease ran out would then get nothing from the claim that made it
    // PENDING again, and only the next one (its periodic recheck, a lease period later)
    // would re-send it.
    const s = await subscription({ max_attempts: 5 });
    const seat = session(s.id, 1, 150);
    const [first] = (await claimOne(pool, seat)).leases;
    assert.ok(first);
    await sleep(250);
    const again = await claimOne(pool, seat);
    assert.deepEqual(
      again.leases.map((l) => [l.delivery.id, l.delivery.lease_epoch]),
      [[first.delivery.id, "2"]],
      "re-sent by the claim that recovered it",
    );
    assert.equal(again.held, 1, "within capacity 1");
  });

  it("leases a connection only its capacity minus what it already holds, whatever is PENDING", async () => {
    // Protocol §5 capacity: what one connection may hold. The claim decides it in the database from
    // the session's LEASED rows, not only from the caller's count of frames in flight.
    const s = await subscription({ max_attempts: 5 });
    const seat = session(s.id, 2);
    const first = await claimOne(pool, seat);
    assert.deepEqual([first.leases.length, first.held], [2, 2]);
    const full = await claimOne(pool, seat);
    assert.deepEqual([full.leases.length, full.held], [0, 2], "at capacity: nothing more, 4 PENDING notwithstanding");
    const wider = await claimOne(pool, { ...seat, capacity: 3 });
    assert.deepEqual([wider.leases.length, wider.held], [1, 3], "room for one more: one");
    const [rows] = await pool.query<any[]>(
      "SELECT state, session_id, COUNT(*) AS n FROM deliveries WHERE subscription_id = ? GROUP BY state, session_id",
      [s.id],
    );
    const counts = new Map(rows.map((r) => [`${r.state} ${r.session_id}`, Number(r.n)]));
    assert.deepEqual([...counts].sort(), [
      [`LEASED ${seat.sessionId}`, 3],
      ["PENDING null", 3],
    ]);
  });

  it("leases a connection no more than its free write slots, and the next connection of the claim the rest", async () => {
    // Protocol §5: a write queue of 8 per connection — a claim leases at most a
    // connection's free write slots (its seat's maxLeases), so deliver frames never pile up
    // behind a slow socket.
    const s = await subscription({ max_attempts: 5 });
    const [a, b] = [session(s.id, 4), session(s.id, 4)];
    const out = await claim(claimPool, {
      subscriptionId: s.id,
      leaseDurationMs: 60000,
      seats: [
        { sessionId: a.sessionId, capacity: 4, maxLeases: 1 },
        { sessionId: b.sessionId, capacity: 4 },
      ],
    });
    assert.deepEqual(
      out.seats.map((seat) => [seat.leases.length, seat.held]),
      [
        [1, 1],
        [4, 4],
      ],
    );
    const [first, rest] = out.seats.map((seat) => seat.leases.map((l) => BigInt(l.delivery.sequence)));
    assert.ok(
      rest!.every((n) => n > first![0]!),
      "oldest first, to the first seat",
    );
    const [rows] = await pool.query<any[]>(
      "SELECT session_id, COUNT(*) AS n FROM deliveries WHERE subscription_id = ? AND state = 'LEASED' GROUP BY session_id",
      [s.id],
    );
    assert.deepEqual(
      new Map(rows.map((r) => [r.session_id, Number(r.n)])),
      new Map([
        [a.sessionId, 1],
        [b.sessionId, 4],
      ]),
    );
  });

  it("refuses a revoked credential's claims and ACKs in the database: nothing more leased, nothing ACKed", async () => {
    // Protocol §7: a revoked credential's open connections may neither claim nor ACK; the engine
    // reads the revocation in the claim's and the ACK's own transaction.
    const owner = await bootstrap(db.url, {
      namespace: "revoked",
      application: "app",
      queues: ["q"],
      eventAccess: true,
    });
    const api2 = client(node.url, owner.token);
    const queue = owner.queues[0]!.id;
    for (let i = 0; i < 3; i++) {
      const t = (await api2.post("/v1/tasks", { queue_id: queue, input: i })).json.data.task;
      await api2.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" });
    }
    await waitSequenced(db, owner.namespace_id);
    const sub = (await api2.post("/v1/subscriptions", { name: "revoked", queue_id: queue, from_sequence: "0" })).json
      .data.subscription.id as string;
    const seat = { sessionId: randomBytes(16).toString("hex"), capacity: 1 };
    const lease = (await claim(claimPool, { subscriptionId: sub, leaseDurationMs: 60000, seats: [seat] })).seats[0]!
      .leases[0]!;
    assert.equal(
      (await runCli(["revoke", "--credential", owner.credential_id], { ORBIT_DATABASE_URL: db.url })).code,
      0,
    );
    const by = { subscriptionId: sub, namespaceId: owner.namespace_id, credentialId: owner.credential_id };
    await assert.rejects(ack(claimPool, by, [proof(lease)]), (e: { code?: string }) => e.code === "UNAUTHENTICATED");
    await assert.rejects(
      claim(claimPool, { subscriptionId: sub, leaseDurationMs: 60000, seats: [{ ...seat, capacity: 3 }] }),
      (e: { code?: string }) => e.code === "UNAUTHENTICATED",
    );
    const [rows] = await pool.query<any[]>(
      "SELECT state, COUNT(*) AS n FROM deliveries WHERE subscription_id = ? GROUP BY state",
      [sub],
    );
    assert.deepEqual(
      new Map(rows.map((r) => [r.state, Number(r.n)])),
      new Map([
        ["LEASED", 1],
        ["PENDING", 2],
      ]),
      "the lease stays unACKed, nothing more leased",
    );
  });

  it("materialises news in the claim that finds it, also right after a claim that had nothing to materialise", async () => {
    // The engine leaves the materialising statements out of a claim's first round trip
    // when the subscription's last claim had nothing to materialise (a hint); the claim
    // that then finds news must still materialise it itself, alongside lease recovery.
    const s = await subscription({ from_sequence: null, max_attempts: 5 });
    await results(3);
    const first = await claimOne(pool, session(s.id, 3, 300));
    assert.equal(first.leases.length, 3);
    assert.equal((await claimOne(pool, session(s.id, 4))).leases.length, 0, "nothing new, nothing ready");
    await results(2);
    await sleep(400); // the 3 leases ran out
    const next = await claimOne(pool, session(s.id, 10));
    const sequences = next.leases.map((l) => BigInt(l.delivery.sequence));
    assert.equal(sequences.length, 5, "the 3 recovered and the 2 new, in one claim");
    assert.deepEqual(
      next.leases.slice(0, 3).map((l) => l.delivery.id),
      first.leases.map((l) => l.delivery.id),
      "recovered, oldest first",
    );
    assert.deepEqual(
      [...sequences].sort((a, b) => (a < b ? -1 : 1)),
      sequences,
    );
    const after = (await api.get(`/v1/subscriptions/${s.id}`)).json.data;
    assert.equal(after.pending_count, 5);
    const [[head]] = (await pool.query("SELECT head_sequence FROM namespace_streams WHERE namespace_id = ?", [
      cred.namespace_id,
    ])) as any;
    assert.equal(after.cursor_sequence, String(head.head_sequence));
  });

  it("answers every ACK handed to a node's batcher together, each by its own proof and subscription, past one batch's 64", async () => {
    // The batcher commits the ACKs of a moment in one transaction per subscription, at most
    // 64 each: 70 ACKs of one subscription and one of another subscription of the same
    // credential, handed over in one turn, must each get their own answer — none dropped,
    // none checked against the other subscription's deliveries.
    const [s1, s2] = [await subscription(), await subscription()];
    const [l1] = (await claimOne(pool, session(s1.id, 1))).leases;
    const [l2] = (await claimOne(pool, session(s2.id, 1))).leases;
    const batcher = new AckBatcher(claimPool);
    const firsts = Array.from({ length: 70 }, () => batcher.submit(who(s1.id), proof(l1!)));
    const other = batcher.submit(who(s2.id), proof(l2!));
    let timer: ReturnType<typeof setTimeout> | undefined;
    const answered = await Promise.race([
      Promise.all([Promise.all(firsts), other]),
      new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), 15000))),
    ]).finally(() => clearTimeout(timer));
    assert.ok(answered, "every ACK was answered");
    const [outcomes, second] = answered;
    assert.ok(
      outcomes.every((o) => o.ok && o.deliveryId === l1!.delivery.id),
      JSON.stringify(outcomes.find((o) => !o.ok)),
    );
    assert.equal(outcomes.filter((o) => o.ok && !o.deduplicated).length, 1, "one ACK counts, the rest are its replays");
    assert.deepEqual([second.ok, second.ok && second.deduplicated, second.deliveryId], [true, false, l2!.delivery.id]);
    for (const [s, l] of [
      [s1, l1!],
      [s2, l2!],
    ] as const) {
      assert.equal(
        (await api.get(`/v1/subscriptions/${s.id}/deliveries/${l.delivery.id}`)).json.data.delivery.state,
        "ACKED",
      );
    }
  });

  it("caps the cumulative attempt budget at 1000000", async () => {
    const s = await subscription({ max_attempts: 1, max_pending: 1 });
    const first = (await claimOne(pool, session(s.id, 1, 100))).leases[0]!;
    await sleep(200);
    await claimOne(pool, session(s.id, 1));
    const c = await db.connect();
    try {
      await c.query("UPDATE deliveries SET attempt_budget = 999950 WHERE id = ?", [first.delivery.id]);
    } finally {
      await c.end();
    }
    const d = (await api.get(`/v1/subscriptions/${s.id}/deliveries/${first.delivery.id}`)).json.data.delivery;
    const path = `/v1/subscriptions/${s.id}/deliveries/${d.id}:retry`;
    assertError(
      await api.post(path, { expected_revision: d.revision, reason: "x", additional_attempts: 51 }),
      409,
      "STATE_CONFLICT",
    );
    const ok = await api.post(path, { expected_revision: d.revision, reason: "x", additional_attempts: 50 });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.data.delivery.attempt_budget, 1000000);
  });

  it("keeps the usage fields as defined: cursor_sequence, pending_count, and a revision only configure moves", async () => {
    const s = await subscription({ max_pending: 4 });
    assert.equal(s.cursor_sequence, "0");
    const leases = (await claimOne(pool, session(s.id, 2))).leases;
    let now = (await api.get(`/v1/subscriptions/${s.id}`)).json.data;
    assert.equal(now.pending_count, 4, "materialised up to max_pending");
    assert.equal(now.cursor_sequence, "4", "scanned up to the fourth result, where the backlog filled");
    assert.equal(now.revision, "1", "materialisation does not move the revision");
    await ack(claimPool, who(s.id), leases.map(proof));
    now = (await api.get(`/v1/subscriptions/${s.id}`)).json.data;
    assert.equal(now.pending_count, 2, "ACKED leaves the backlog");
    assert.equal(now.revision, "1", "nor does an ACK");
    await claimOne(pool, session(s.id, 0));
    now = (await api.get(`/v1/subscriptions/${s.id}`)).json.data;
    assert.equal(now.pending_count, 4);
    assert.equal(now.cursor_sequence, "6", "the whole log is scanned once room allows");
  });

  it("keeps under retention every event a delivery still owes; an ACKED one's purged event is 410", async () => {
    // A namespace of its own: other subscriptions here still owe the older events.
    const own = await bootstrap(db.url, {
      namespace: "retained",
      application: "app",
      queues: ["q"],
      eventAccess: true,
    });
    const api2 = client(node.url, own.token);
    for (let i = 0; i < 3; i++) {
      const t = (await api2.post("/v1/tasks", { queue_id: own.queues[0]!.id, input: i })).json.data.task;
      await api2.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" });
    }
    await waitSequenced(db, own.namespace_id);
    const created = await api2.post("/v1/subscriptions", {
      name: "retained",
      queue_id: own.queues[0]!.id,
      from_sequence: "0",
      max_pending: 2,
    });
    const sid = created.json.data.subscription.id as string;
    const [first, second] = (await claimOne(pool, session(sid, 2))).leases;
    await ack(claimPool, { subscriptionId: sid, namespaceId: own.namespace_id, credentialId: own.credential_id }, [
      proof(first!),
    ]);
    const res = await runCli(["purge", "--namespace", "retained", "--before", "4"], { ORBIT_DATABASE_URL: db.url });
    assert.equal(res.code, 0, res.stderr);
    assert.match(res.stdout, /purged 2 events/, "event 1 (ACKED) and event 3 (never materialised) go; event 2 stays");
    const gone = await api2.get(`/v1/subscriptions/${sid}/deliveries/${first!.delivery.id}`);
    assertError(gone, 410, "EVENT_HISTORY_EXPIRED");
    assertContract("getEventDelivery", gone);
    const kept = await api2.get(`/v1/subscriptions/${sid}/deliveries/${second!.delivery.id}`);
    assert.equal(kept.status, 200, "a LEASED delivery keeps its event");
    assert.equal(kept.json.data.event.id, second!.delivery.event_id);
  });
});

// Subscription management over real HTTP (docs/protocol.md §1-3): create with its field rules and
// idempotency, owner and scope on every operation, list paging, configure, the 64 limit.
import { strict as assert } from "node:assert";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, runCli, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client, makeCredential, waitSequenced, type Client } from "../helpers/api.js";
import { assertContract, assertError } from "../helpers/contract.js";
import { request } from "../helpers/http.js";
import { encodeCursor } from "../../src/domain/paging.js";

const ID = "0123456789abcdef0123456789abcdef";
const ALL = ["task.cancelled", "task.failed", "task.needs_review", "task.succeeded"];

describe("subscriptions", () => {
  let db: TestDatabase;
  let node: OrbitNode;
  let owner: BootstrapOutput;
  let peer: BootstrapOutput; // same namespace, application and queues; another credential
  let api: Client;
  let q: string;
  let n = 0;
  const name = () => `sub-${++n}`;
  const create = (body: Record<string, unknown>, key?: string) =>
    api.post("/v1/subscriptions", { name: name(), queue_id: q, ...body }, key);

  /** Appends `count` result events to queue q through the task API. */
  async function results(count: number): Promise<void> {
    for (let i = 0; i < count; i++) {
      const t = (await api.post("/v1/tasks", { queue_id: q, input: i })).json.data.task;
      assert.equal((await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" })).status, 200);
    }
    await waitSequenced(db, owner.namespace_id);
  }
  const head = async () => {
    const c = await db.connect();
    try {
      return String(
        (
          (
            await c.query<any[]>("SELECT head_sequence FROM namespace_streams WHERE namespace_id = ?", [
              owner.namespace_id,
            ])
          )[0] as any[]
        )[0].head_sequence,
      );
    } finally {
      await c.end();
    }
  };

  before(async () => {
    db = await freshDatabase("subscriptions");
    owner = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q", "q2"], eventAccess: true });
    peer = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q", "q2"], eventAccess: true });
    node = await startNode(db.url);
    api = client(node.url, owner.token);
    q = owner.queues[0]!.id;
    await results(3);
  });
  after(async () => {
    await node?.stop();
    await db?.drop();
  });

  describe("create", () => {
    it("applies the defaults and answers with the exact subscription object", async () => {
      const res = await api.post("/v1/subscriptions", { name: "object-results", queue_id: q }, "create-defaults");
      assert.equal(res.status, 201, res.text);
      assertContract("createSubscription", res);
      const s = res.json.data.subscription;
      assert.equal(res.json.data.deduplicated, false);
      assert.deepEqual(Object.keys(s).sort(), [
        "created_at",
        "credential_id",
        "cursor_sequence",
        "enabled",
        "id",
        "max_attempts",
        "max_pending",
        "name",
        "pending_count",
        "queue_id",
        "revision",
        "types",
        "updated_at",
      ]);
      assert.equal(s.credential_id, owner.credential_id);
      assert.equal(s.revision, "1");
      assert.equal(s.enabled, true);
      assert.deepEqual(s.types, ALL);
      assert.equal(s.cursor_sequence, await head(), "omitted from_sequence: right after the committed head");
      assert.equal(s.pending_count, 0);
      assert.equal(s.max_pending, 100);
      assert.equal(s.max_attempts, 20);
    });

    it("treats 0 as the default, [] as all four types, and sorts types", async () => {
      const a = (await create({ max_pending: 0, max_attempts: 0, types: [] })).json.data.subscription;
      assert.deepEqual([a.max_pending, a.max_attempts, a.types], [100, 20, ALL]);
      const b = (await create({ max_pending: 1000, max_attempts: 100, types: ["task.succeeded", "task.cancelled"] }))
        .json.data.subscription;
      assert.deepEqual([b.max_pending, b.max_attempts, b.types], [1000, 100, ["task.cancelled", "task.succeeded"]]);
      const c = (await create({ max_pending: 1, max_attempts: 1, types: ["task.needs_review"] })).json.data
        .subscription;
      assert.deepEqual([c.max_pending, c.max_attempts], [1, 1]);
    });

    it("rejects every field outside its rule with 400 and writes nothing", async () => {
      const c = await db.connect();
      const count = async () =>
        Number(((await c.query<any[]>("SELECT COUNT(*) AS n FROM subscriptions"))[0] as any[])[0].n);
      try {
        const before = await count();
        const bad: Record<string, unknown>[] = [
          { name: "" },
          { name: "-starts-with-dash" },
          { name: "has space" },
          { name: "é" },
          { name: "x".repeat(129) },
          { queue_id: "short" },
          { types: ["task.requeued"] },
          { types: ["task.failed", "task.failed"] },
          { types: ["task.failed", "task.cancelled", "task.succeeded", "task.needs_review", "task.failed"] },
          { types: "task.failed" },
          { from_sequence: "01" },
          { from_sequence: 3 },
          { from_sequence: "18446744073709551616" },
          { max_pending: 1001 },
          { max_pending: -1 },
          { max_pending: 1.5 },
          { max_attempts: 101 },
          { max_attempts: "20" },
          { Name: "x" },
          { enabled: false },
        ];
        for (const b of bad) {
          const res = await create(b);
          assertError(res, 400, "INVALID_ARGUMENT");
          assertContract("createSubscription", res);
        }
        assertError(await create({ from_sequence: (BigInt(await head()) + 1n).toString() }), 400, "INVALID_ARGUMENT");
        assertError(await api.post("/v1/subscriptions", { name: name(), queue_id: q }, null), 400, "INVALID_ARGUMENT");
        assert.equal(await count(), before);
        assert.equal((await create({ name: "x".repeat(128) })).status, 201, "128 characters are allowed");
        assert.equal((await create({ name: "9a.b_c-D" })).status, 201);
      } finally {
        await c.end();
      }
    });

    it("starts where from_sequence says: the head, the retained start, or a given sequence", async () => {
      const h = await head();
      assert.equal((await create({ from_sequence: null })).json.data.subscription.cursor_sequence, h);
      assert.equal((await create({ from_sequence: "0" })).json.data.subscription.cursor_sequence, "0");
      assert.equal((await create({ from_sequence: "2" })).json.data.subscription.cursor_sequence, "2");
      assert.equal((await create({ from_sequence: h })).json.data.subscription.cursor_sequence, h);
    });

    it("keeps names unique in the namespace, and refuses queues outside the scope or actions it lacks", async () => {
      assert.equal((await create({ name: "unique-name" })).status, 201);
      assertError(await create({ name: "unique-name" }), 409, "STATE_CONFLICT");
      // The body's 400 before the state's 409 (the order of checks): from_sequence above the head.
      assertError(
        await create({ name: "unique-name", from_sequence: (BigInt(await head()) + 1n).toString() }),
        400,
        "INVALID_ARGUMENT",
      );
      assertError(
        await client(node.url, peer.token).post("/v1/subscriptions", { name: "unique-name", queue_id: q }),
        409,
        "STATE_CONFLICT",
      );
      assertError(await create({ queue_id: ID }), 404, "NOT_FOUND");
      // 404 before the Idempotency-Key's 400 (openapi order).
      assertError(await api.post("/v1/subscriptions", { name: "no-key", queue_id: ID }, null), 404, "NOT_FOUND");
      const other = await bootstrap(db.url, { namespace: "ns2", application: "app", queues: ["q"], eventAccess: true });
      assertError(await create({ queue_id: other.queues[0]!.id }), 404, "NOT_FOUND");
      // Protocol §2: unique within the namespace only; another namespace may use the name.
      const elsewhere = await client(node.url, other.token).post("/v1/subscriptions", {
        name: "unique-name",
        queue_id: other.queues[0]!.id,
      });
      assert.equal(elsewhere.status, 201, elsewhere.text);
      const tasksOnly = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"] });
      assertError(
        await client(node.url, tasksOnly.token).post("/v1/subscriptions", { name: name(), queue_id: q }),
        403,
        "PERMISSION_DENIED",
      );
      const reader = await makeCredential(db, {
        namespaceId: owner.namespace_id,
        applicationId: owner.application_id,
        actions: ["events:read"],
        queueIds: [q],
      });
      assertError(
        await client(node.url, reader.token).post("/v1/subscriptions", { name: name(), queue_id: q }),
        403,
        "PERMISSION_DENIED",
      );
    });

    it("replays with the ORIGINAL snapshot; the same key with other content is 409", async () => {
      const body = { name: "replayed", queue_id: q, max_pending: 5 };
      const first = await api.post("/v1/subscriptions", body, "create-replay");
      assert.equal(first.status, 201);
      const s = first.json.data.subscription;
      const paused = await api.post(`/v1/subscriptions/${s.id}:configure`, {
        expected_revision: "1",
        enabled: false,
        reason: "r",
      });
      assert.equal(paused.status, 200);
      const again = await api.post(
        "/v1/subscriptions",
        { max_pending: 5, queue_id: q, name: "replayed" },
        "create-replay",
      );
      assert.equal(again.status, 200);
      assertContract("createSubscription", again);
      assert.equal(again.json.data.deduplicated, true);
      assert.deepEqual(again.json.data.subscription, s, "the snapshot at creation, not the current state");
      assertError(
        await api.post("/v1/subscriptions", { ...body, max_pending: 6 }, "create-replay"),
        409,
        "IDEMPOTENCY_CONFLICT",
      );
      assertError(
        await api.post("/v1/subscriptions", { ...body, name: "other-name" }, "create-replay"),
        409,
        "IDEMPOTENCY_CONFLICT",
      );
    });

    it("replays a create written differently but meaning the same; a different meaning is still 409", async () => {
      const post = (text: string) =>
        request(node.url, {
          method: "POST",
          path: "/v1/subscriptions",
          token: owner.token,
          headers: [["Idempotency-Key", "create-normalised"]],
          body: text,
        });
      const first = await post(
        `{"name":"normalised","queue_id":"${q}","max_pending":0,"types":["task.failed","task.cancelled"]}`,
      );
      assert.equal(first.status, 201, first.text);
      const same = [
        // 0.0 is 0, and 0 is the default 100, spelled out or left out
        `{"name":"normalised","queue_id":"${q}","max_pending":0.0,"types":["task.failed","task.cancelled"]}`,
        `{"name":"normalised","queue_id":"${q}","max_pending":100,"types":["task.cancelled","task.failed"]}`,
        `{"queue_id":"${q}","types":["task.cancelled","task.failed"],"name":"normalised","max_attempts":20}`,
        `{"name":"normalised","queue_id":"${q}","max_pending":1e2,"types":["task.failed","task.cancelled"],"max_attempts":20.0}`,
      ];
      for (const text of same) {
        const again = await post(text);
        assert.equal(again.status, 200, `${text}: ${again.text}`);
        assert.equal(again.json.data.deduplicated, true);
        assert.deepEqual(again.json.data.subscription, first.json.data.subscription);
      }
      for (const text of [
        `{"name":"normalised","queue_id":"${q}","max_pending":99,"types":["task.failed","task.cancelled"]}`,
        `{"name":"normalised","queue_id":"${q}","types":["task.failed"]}`,
        `{"name":"normalised","queue_id":"${q}","types":["task.failed","task.cancelled"],"from_sequence":"0"}`,
        `{"name":"normalised","queue_id":"${q}","types":["task.failed","task.cancelled"],"max_attempts":19}`,
      ]) {
        assertError(await post(text), 409, "IDEMPOTENCY_CONFLICT");
      }
      const rows = await db.query("SELECT COUNT(*) AS n FROM subscriptions WHERE name = 'normalised'");
      assert.equal(Number(rows[0].n), 1);
    });

    it("refuses a from_sequence before the retention boundary with 410 EVENT_HISTORY_EXPIRED", async () => {
      const other = await bootstrap(db.url, {
        namespace: "purged",
        application: "app",
        queues: ["q"],
        eventAccess: true,
      });
      const api2 = client(node.url, other.token);
      for (let i = 0; i < 4; i++) {
        const t = (await api2.post("/v1/tasks", { queue_id: other.queues[0]!.id, input: i })).json.data.task;
        await api2.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" });
      }
      await waitSequenced(db, other.namespace_id);
      assert.equal(
        (await runCli(["purge", "--namespace", "purged", "--before", "3"], { ORBIT_DATABASE_URL: db.url })).code,
        0,
      );
      const body = (from: string) => ({ name: name(), queue_id: other.queues[0]!.id, from_sequence: from });
      const expired = await api2.post("/v1/subscriptions", body("1"));
      assertError(expired, 410, "EVENT_HISTORY_EXPIRED");
      assertContract("createSubscription", expired);
      assert.equal((await api2.post("/v1/subscriptions", body("2"))).json.data.subscription.cursor_sequence, "2");
      assert.equal(
        (await api2.post("/v1/subscriptions", body("0"))).json.data.subscription.cursor_sequence,
        "2",
        '"0" is the start of the retained log',
      );
    });
  });

  describe("owner and scope", () => {
    it("hides a subscription from every other credential, even in the same application", async () => {
      const s = (await create({})).json.data.subscription;
      const peerApi = client(node.url, peer.token);
      assertError(await peerApi.get(`/v1/subscriptions/${s.id}`), 404, "NOT_FOUND");
      assertError(
        await peerApi.post(`/v1/subscriptions/${s.id}:configure`, {
          expected_revision: "1",
          enabled: false,
          reason: "x",
        }),
        404,
        "NOT_FOUND",
      );
      assertError(await peerApi.get(`/v1/subscriptions/${s.id}/deliveries`), 404, "NOT_FOUND");
      assertError(await peerApi.get(`/v1/subscriptions/${s.id}/deliveries/${ID}`), 404, "NOT_FOUND");
      assertError(
        await peerApi.post(`/v1/subscriptions/${s.id}/deliveries/${ID}:retry`, {
          expected_revision: "1",
          reason: "x",
          additional_attempts: 1,
        }),
        404,
        "NOT_FOUND",
      );
      const list = await peerApi.get(`/v1/subscriptions?queue_id=${q}&limit=100`);
      assert.equal(list.status, 200);
      assert.ok(!list.json.data.items.some((x: any) => x.id === s.id), "never listed for another credential");
      // The owner loses it too once the queue leaves its scope.
      const narrow = await makeCredential(db, {
        namespaceId: owner.namespace_id,
        applicationId: owner.application_id,
        actions: ["events:read"],
        queueIds: [owner.queues[1]!.id],
      });
      assertError(await client(node.url, narrow.token).get(`/v1/subscriptions/${s.id}`), 404, "NOT_FOUND");
    });

    it("answers the owner with the current object; reads change nothing", async () => {
      const s = (await create({})).json.data.subscription;
      const a = await api.get(`/v1/subscriptions/${s.id}`);
      assert.equal(a.status, 200);
      assertContract("getSubscription", a);
      const b = await api.get(`/v1/subscriptions/${s.id}`);
      assert.deepEqual(a.json.data, b.json.data);
      assert.deepEqual(a.json.data, s);
    });
  });

  describe("list", () => {
    it("pages newest first by created_at then id, with cursors bound to queue, credential and namespace", async () => {
      const mine = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
      const api3 = client(node.url, mine.token);
      const created: string[] = [];
      for (let i = 0; i < 5; i++)
        created.push((await api3.post("/v1/subscriptions", { name: name(), queue_id: q })).json.data.subscription.id);
      const seen: string[] = [];
      let cursor: string | undefined;
      for (let pageNo = 0; pageNo < 5; pageNo++) {
        const res = await api3.get(`/v1/subscriptions?queue_id=${q}&limit=2${cursor ? `&cursor=${cursor}` : ""}`);
        assert.equal(res.status, 200, res.text);
        assertContract("listSubscriptions", res);
        seen.push(...res.json.data.items.map((x: any) => x.id));
        cursor = res.json.data.next_cursor;
        if (!cursor) break;
      }
      assert.deepEqual(seen, [...created].reverse(), "all five, newest first, each once");
      const all = await api3.get(`/v1/subscriptions?queue_id=${q}`);
      assert.equal(all.json.data.items.length, 5);
      assert.equal(all.json.data.next_cursor, undefined);
      const first = await api3.get(`/v1/subscriptions?queue_id=${q}&limit=1`);
      const c1 = first.json.data.next_cursor as string;
      assertError(await api3.get(`/v1/subscriptions?queue_id=${owner.queues[1]!.id}&cursor=${c1}`), 404, "NOT_FOUND"); // q2 is not in mine's scope
      assertError(
        await client(node.url, owner.token).get(`/v1/subscriptions?queue_id=${q}&cursor=${c1}`),
        400,
        "INVALID_ARGUMENT",
      );
      // Another queue in the same credential's scope: the cursor is bound to its queue
      // (protocol §3: a cursor may not be used with another queue), not only to the
      // credential (the 404 above is the scope's).
      for (let i = 0; i < 2; i++) assert.equal((await create({})).status, 201);
      const ownCursor = (await client(node.url, owner.token).get(`/v1/subscriptions?queue_id=${q}&limit=1`)).json.data
        .next_cursor as string;
      assert.ok(ownCursor, "owner has more than one subscription on q");
      assertError(
        await client(node.url, owner.token).get(
          `/v1/subscriptions?queue_id=${owner.queues[1]!.id}&cursor=${ownCursor}`,
        ),
        400,
        "INVALID_ARGUMENT",
      );
      assertError(await api3.get(`/v1/subscriptions?queue_id=${q}&cursor=bm90LWEtY3Vyc29y`), 400, "INVALID_ARGUMENT");
      assertError(await api3.get(`/v1/subscriptions?queue_id=${q}&cursor=%2F%2F`), 400, "INVALID_ARGUMENT");
      const forged = encodeCursor(
        { list: `subscriptions:${q}`, credentialId: owner.credential_id, namespaceId: owner.namespace_id, filter: "" },
        { createdAt: new Date(Date.UTC(9999, 11, 31, 23, 59, 59, 999)), id: "f".repeat(32) },
      );
      assertError(await api3.get(`/v1/subscriptions?queue_id=${q}&cursor=${forged}`), 400, "INVALID_ARGUMENT");
      // A position no created_at can hold (DATETIME(3): years 0000-9999) is no position of
      // this list (not an empty 200).
      for (const t of [Date.UTC(10000, 0, 1), 8.64e15, 8.64e15 + 1, 9e15, -1]) {
        const outOfRange = Buffer.from(
          JSON.stringify({
            l: `subscriptions:${q}`,
            c: mine.credential_id,
            n: mine.namespace_id,
            f: "",
            t,
            i: "f".repeat(32),
          }),
        ).toString("base64url");
        assertError(await api3.get(`/v1/subscriptions?queue_id=${q}&cursor=${outOfRange}`), 400, "INVALID_ARGUMENT");
      }
      const ownApi = client(node.url, owner.token);
      const theirs = await ownApi.get(`/v1/subscriptions?queue_id=${q}&limit=100&cursor=${forged}`);
      assert.equal(theirs.status, 200, "a cursor forged for owner's own list only reaches owner's rows");
      assert.ok(theirs.json.data.items.every((x: any) => x.credential_id === owner.credential_id));
      assert.ok(!theirs.json.data.items.some((x: any) => created.includes(x.id)));
      assertError(await api3.get(`/v1/subscriptions?queue_id=${ID}`), 404, "NOT_FOUND");
    });

    it("lists only the caller's subscriptions in the queue it names, 20 a page by default", async () => {
      // Protocol §3: a list holds only the current credential's subscriptions in that queue:
      // a credential with subscriptions on two
      // queues of its scope sees each queue's own in that queue's list, never the other's.
      const two = await bootstrap(db.url, {
        namespace: "ns",
        application: "app",
        queues: ["q", "q2"],
        eventAccess: true,
      });
      const api5 = client(node.url, two.token);
      const [q1, q2] = two.queues.map((x) => x.id) as [string, string];
      const on = async (queue: string, count: number) => {
        const ids: string[] = [];
        for (let i = 0; i < count; i++) {
          const res = await api5.post("/v1/subscriptions", { name: name(), queue_id: queue });
          assert.equal(res.status, 201, res.text);
          ids.push(res.json.data.subscription.id);
        }
        return ids;
      };
      const first = await on(q1, 21);
      const second = await on(q2, 2);
      const ofQ2 = await api5.get(`/v1/subscriptions?queue_id=${q2}`);
      assert.equal(ofQ2.status, 200, ofQ2.text);
      assert.deepEqual(
        ofQ2.json.data.items.map((x: any) => x.id),
        [...second].reverse(),
        "q2's two, none of q's",
      );
      assert.ok(ofQ2.json.data.items.every((x: any) => x.queue_id === q2));
      const ofQ1 = await api5.get(`/v1/subscriptions?queue_id=${q1}`);
      assert.equal(ofQ1.json.data.items.length, 20, "limit omitted: 20");
      assert.deepEqual(
        ofQ1.json.data.items.map((x: any) => x.id),
        [...first].reverse().slice(0, 20),
      );
      const rest = await api5.get(`/v1/subscriptions?queue_id=${q1}&cursor=${ofQ1.json.data.next_cursor}`);
      assert.deepEqual(
        rest.json.data.items.map((x: any) => x.id),
        [first[0]],
        "the 21st on the next page, and none of q2's",
      );
      assert.equal(rest.json.data.next_cursor, undefined);
      // created_at DESC, id DESC: two created in the same millisecond (set by hand) come by id,
      // one a page, each once.
      await db.query(
        "UPDATE subscriptions SET created_at = (SELECT MIN(created_at) FROM (SELECT created_at FROM subscriptions WHERE id IN (?)) t) WHERE id IN (?)",
        [second, second],
      );
      const byId = [...second].sort().reverse();
      const p1 = await api5.get(`/v1/subscriptions?queue_id=${q2}&limit=1`);
      const p2 = await api5.get(`/v1/subscriptions?queue_id=${q2}&limit=1&cursor=${p1.json.data.next_cursor}`);
      assert.deepEqual(
        [...p1.json.data.items, ...p2.json.data.items].map((x: any) => x.id),
        byId,
      );
      assert.equal(p2.json.data.next_cursor, undefined);
    });
  });

  describe("configure", () => {
    it("changes only enabled, bumps the revision on every command, and audits each", async () => {
      // Created with the key the pause uses below: keys are scoped to their operation kind.
      const s = (await create({}, "pause-1")).json.data.subscription;
      const path = `/v1/subscriptions/${s.id}:configure`;
      const pause = await api.post(
        path,
        { expected_revision: "1", enabled: false, reason: "receiver maintenance" },
        "pause-1",
      );
      assert.equal(pause.status, 200, pause.text);
      assertContract("configureSubscription", pause);
      assert.equal(pause.json.data.deduplicated, false);
      assert.equal(pause.json.data.subscription.enabled, false);
      assert.equal(pause.json.data.subscription.revision, "2");
      const same = await api.post(path, { expected_revision: "2", enabled: false, reason: "again" });
      assert.equal(same.json.data.subscription.revision, "3", "the same boolean still counts");
      const replay = await api.post(
        path,
        { expected_revision: "1", enabled: false, reason: "receiver maintenance" },
        "pause-1",
      );
      assert.equal(replay.status, 200);
      assert.equal(replay.json.data.deduplicated, true);
      assert.deepEqual(replay.json.data.subscription, pause.json.data.subscription, "the original receipt, revision 2");
      // The same key and body on ANOTHER subscription is other content (the path target is
      // part of it): 409, never the first subscription's receipt, and that one stays enabled.
      const s2 = (await create({})).json.data.subscription;
      const elsewhere = await api.post(
        `/v1/subscriptions/${s2.id}:configure`,
        { expected_revision: "1", enabled: false, reason: "receiver maintenance" },
        "pause-1",
      );
      assertError(elsewhere, 409, "IDEMPOTENCY_CONFLICT");
      assert.deepEqual((await api.get(`/v1/subscriptions/${s2.id}`)).json.data, s2);
      assertError(
        await api.post(path, { expected_revision: "2", enabled: true, reason: "stale" }),
        409,
        "STATE_CONFLICT",
      );
      assertError(
        await api.post(path, { expected_revision: "3", enabled: true, reason: "other" }, "pause-1"),
        409,
        "IDEMPOTENCY_CONFLICT",
      );
      const resume = await api.post(path, { expected_revision: "3", enabled: true, reason: "back" }, "resume-1");
      assert.equal(resume.json.data.subscription.enabled, true);
      assert.equal(resume.json.data.subscription.revision, "4");
      const c = await db.connect();
      try {
        const [rows] = await c.query<any[]>(
          "SELECT credential_id, action, details, reason, revision_before, revision_after, created_at FROM audit_records WHERE subscription_id = ? ORDER BY created_at, revision_before",
          [s.id],
        );
        assert.deepEqual(
          rows.map((r) => [
            r.credential_id,
            r.action,
            JSON.parse(r.details).enabled,
            r.reason,
            String(r.revision_before),
            String(r.revision_after),
          ]),
          [
            [owner.credential_id, "subscription.configure", false, "receiver maintenance", "1", "2"],
            [owner.credential_id, "subscription.configure", false, "again", "2", "3"],
            [owner.credential_id, "subscription.configure", true, "back", "3", "4"],
          ],
        );
        assert.ok(rows.every((r) => r.created_at instanceof Date));
      } finally {
        await c.end();
      }
    });

    it("requires all three fields, a canonical revision and a 1-1024 character reason", async () => {
      const s = (await create({})).json.data.subscription;
      const path = `/v1/subscriptions/${s.id}:configure`;
      for (const body of [
        { enabled: false, reason: "r" },
        { expected_revision: "1", reason: "r" },
        { expected_revision: "1", enabled: false },
        { expected_revision: "1", enabled: "false", reason: "r" },
        { expected_revision: "01", enabled: false, reason: "r" },
        { expected_revision: 1, enabled: false, reason: "r" },
        { expected_revision: "1", enabled: false, reason: "" },
        { expected_revision: "1", enabled: false, reason: "x".repeat(1025) },
        { expected_revision: "1", enabled: false, reason: "r", name: "renamed" },
        { expected_revision: "1", enabled: false, reason: "r", types: [] },
      ]) {
        assertError(await api.post(path, body), 400, "INVALID_ARGUMENT");
      }
      assertError(
        await api.post(path, { expected_revision: "1", enabled: false, reason: "r" }, null),
        400,
        "INVALID_ARGUMENT",
      );
      const ok = await api.post(path, { expected_revision: "1", enabled: false, reason: "字".repeat(1024) });
      assert.equal(ok.status, 200, "1024 Unicode characters");
      assertError(
        await api.post(`/v1/subscriptions/${ID}:configure`, { expected_revision: "1", enabled: false, reason: "r" }),
        404,
        "NOT_FOUND",
      );
    });

    it("refuses a command at the revision's maximum with 409 STATE_CONFLICT and changes nothing", async () => {
      // Only a database edit gets there (2^64 - 1 commands), but the bump would overflow
      // BIGINT UNSIGNED: a clear refusal, never a 500, and no audit record.
      const s = (await create({})).json.data.subscription;
      const max = "18446744073709551615";
      const c = await db.connect();
      try {
        await c.query("UPDATE subscriptions SET revision = ? WHERE id = ?", [max, s.id]);
        const res = await api.post(`/v1/subscriptions/${s.id}:configure`, {
          expected_revision: max,
          enabled: false,
          reason: "r",
        });
        assertError(res, 409, "STATE_CONFLICT");
        assert.match(res.json.error.message, /maximum/);
        const now = (await api.get(`/v1/subscriptions/${s.id}`)).json.data;
        assert.equal(now.enabled, true);
        assert.equal(now.revision, max);
        const [audits] = await c.query<any[]>("SELECT COUNT(*) AS n FROM audit_records WHERE subscription_id = ?", [
          s.id,
        ]);
        assert.equal(Number(audits[0].n), 0);
      } finally {
        await c.end();
      }
    });
  });

  describe("the limit of 64 per namespace", () => {
    it("lets exactly 64 of 70 concurrent creates through; the rest get SUBSCRIPTION_LIMIT", async () => {
      const team = await bootstrap(db.url, {
        namespace: "crowded",
        application: "app",
        queues: ["q"],
        eventAccess: true,
      });
      const api4 = client(node.url, team.token);
      const results = await Promise.all(
        Array.from({ length: 70 }, (_, i) =>
          api4.post("/v1/subscriptions", { name: `s${i}`, queue_id: team.queues[0]!.id }),
        ),
      );
      const created = results.filter((r) => r.status === 201).length;
      const refused = results.filter((r) => r.status === 409 && r.json.error.code === "SUBSCRIPTION_LIMIT");
      assert.equal(created, 64);
      assert.equal(refused.length, 6);
      for (const r of refused) assertContract("createSubscription", r);
      assertError(
        await api4.post("/v1/subscriptions", { name: "s-late", queue_id: team.queues[0]!.id }),
        409,
        "SUBSCRIPTION_LIMIT",
      );
      // The namespace's limit, whichever credential of it asks (at most 64 subscriptions per
      // namespace).
      const mate = await bootstrap(db.url, {
        namespace: "crowded",
        application: "app2",
        queues: ["q"],
        eventAccess: true,
      });
      assertError(
        await client(node.url, mate.token).post("/v1/subscriptions", { name: "s-mate", queue_id: mate.queues[0]!.id }),
        409,
        "SUBSCRIPTION_LIMIT",
      );
      const c = await db.connect();
      try {
        const [rows] = await c.query<any[]>("SELECT COUNT(*) AS n FROM subscriptions WHERE namespace_id = ?", [
          team.namespace_id,
        ]);
        assert.equal(Number(rows[0].n), 64, "the namespace never holds more than 64");
      } finally {
        await c.end();
      }
    });
  });
});

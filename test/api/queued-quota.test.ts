// The optional limit on a namespace's QUEUED tasks (ORBIT_MAX_QUEUED_TASKS_PER_NAMESPACE,
// docs/tasks.md §4): a submit beyond it is 429 CAPACITY_EXCEEDED with Retry-After and the
// contract's envelope, and writes nothing; a replay of a submit that landed is still
// answered; other namespaces, RUNNING tasks and a node without the setting are not held
// back; submits under way at once never pass it; a revoked credential is 401 all the same;
// once a worker takes a task, the namespace may submit again.
import { strict as assert } from "node:assert";
import { client, type Client } from "../helpers/api.js";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { assertOperation } from "../helpers/openapi.js";
import { QUOTA_REFRESH_MS } from "../../src/domain/queued-quota.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const LIMIT = 3;

describe("queued-task limit per namespace", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let a: BootstrapOutput;
  let b: BootstrapOutput;
  let node: OrbitNode;
  let unlimited: OrbitNode;
  let api: Client;

  before(async () => {
    db = await freshDatabase("queued_quota");
    a = await bootstrap(db.url, { namespace: "a", application: "app", queues: ["q1", "q2"] });
    b = await bootstrap(db.url, { namespace: "b", application: "app", queues: ["q"] });
    node = await startNode(db.url, { ORBIT_MAX_QUEUED_TASKS_PER_NAMESPACE: String(LIMIT) });
    unlimited = await startNode(db.url);
    api = client(node.url, a.token);
  });
  after(async () => {
    await node?.stop();
    await unlimited?.stop();
    await db?.drop();
  });

  const submit = (c: Client, queueId: string, key: string, input: unknown = key) =>
    c.post("/v1/tasks", { queue_id: queueId, input }, key);
  const taskCount = async () => Number((await db.query("SELECT COUNT(*) AS n FROM tasks"))[0].n);

  it("refuses the submit beyond the limit with 429 and writes nothing; a replay is still answered", async () => {
    const [q1, q2] = [a.queues[0]!.id, a.queues[1]!.id];
    // The limit is the namespace's, across its queues.
    const first = await submit(api, q1, "k1");
    assert.equal(first.status, 201);
    assert.equal((await submit(api, q2, "k2")).status, 201);
    assert.equal((await submit(api, q1, "k3")).status, 201);

    const refused = await submit(api, q2, "k4");
    assert.equal(refused.status, 429, refused.text);
    assert.equal(refused.json.error.code, "CAPACITY_EXCEEDED");
    assert.equal(refused.json.error.message, "the namespace has its maximum of queued tasks");
    assert.equal(refused.headers["retry-after"], "1");
    assertOperation("submitTask", refused);
    assert.equal(await taskCount(), LIMIT);
    const keys = await db.query("SELECT COUNT(*) AS n FROM idempotency_keys WHERE idem_key = 'k4'");
    assert.equal(Number(keys[0].n), 0, "the refused submit left its key behind");

    // A retry of a submit that landed (its answer lost) gets its receipt, not 429.
    const replay = await submit(api, q1, "k1");
    assert.equal(replay.status, 200);
    assert.equal(replay.json.data.deduplicated, true);
    assert.equal(replay.json.data.task.id, first.json.data.task.id);
    // The same key with other content is still the idempotency conflict.
    const conflict = await submit(api, q1, "k1", "other");
    assert.equal(conflict.status, 409);
    assert.equal(conflict.json.error.code, "IDEMPOTENCY_CONFLICT");
    assert.equal(await taskCount(), LIMIT);
  });

  it("holds back no other namespace, and no node without the setting", async () => {
    assert.equal((await submit(client(node.url, b.token), b.queues[0]!.id, "b1")).status, 201);
    assert.equal((await submit(client(unlimited.url, a.token), a.queues[0]!.id, "u1")).status, 201);
  });

  it("takes submits again once a worker has claimed QUEUED tasks", async () => {
    // Four QUEUED now (the unlimited node took one); two claims leave two.
    for (let i = 0; i < 2; i++) {
      const claim = await api.post("/v1/worker/claim", { queue_id: a.queues[0]!.id });
      assert.equal(claim.status, 200, claim.text);
    }
    // Once its count is older than the refresh interval, a node that would refuse reads
    // it again first: the first submit after the claims is taken.
    await sleep(QUOTA_REFRESH_MS + 100);
    const res = await submit(api, a.queues[1]!.id, "k4");
    assert.equal(res.status, 201, res.text);
    // Three QUEUED again: the next one is refused.
    const refused = await submit(api, a.queues[1]!.id, "k5");
    assert.equal(refused.status, 429, refused.text);
  });

  it("lets submits under way at once take only the places left", async () => {
    const c = await bootstrap(db.url, { namespace: "c", application: "app", queues: ["q"] });
    const api = client(node.url, c.token);
    const answers = await Promise.all(
      Array.from({ length: LIMIT + 5 }, (_, i) => submit(api, c.queues[0]!.id, `burst-${i}`)),
    );
    const statuses = answers.map((r) => r.status).sort();
    assert.deepEqual(statuses, [...Array(LIMIT).fill(201), ...Array(5).fill(429)]);
  });

  it("answers a revoked credential 401, not 429, however full its namespace", async () => {
    const d = await bootstrap(db.url, { namespace: "d", application: "app", queues: ["q"] });
    const api = client(node.url, d.token);
    for (let i = 0; i < LIMIT; i++) assert.equal((await submit(api, d.queues[0]!.id, `d-${i}`)).status, 201);
    assert.equal((await submit(api, d.queues[0]!.id, "d-full")).status, 429);
    // Revoked in the database: the node still knows the token from memory.
    await db.query("UPDATE credentials SET revoked_at = UTC_TIMESTAMP(3) WHERE id = ?", [d.credential_id]);
    const res = await submit(api, d.queues[0]!.id, "d-0");
    assert.equal(res.status, 401, res.text);
    assert.equal(res.json.error.code, "UNAUTHENTICATED");
  });
});

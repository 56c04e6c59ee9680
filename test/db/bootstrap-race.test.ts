// Concurrent `orbit bootstrap` runs for the same names (docs/operations.md: it "creates what does
// not exist yet (by name) and a new credential"): every run succeeds, they share one row
// per name, and each gets its own credential pointing at those rows. Without the locking
// reads in queries/identity.ts, a run whose snapshot predates the other run's commit
// would find no row after INSERT IGNORE and fail with a TypeError.
import { strict as assert } from "node:assert";
import type { RowDataPacket } from "mysql2/promise";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { createPool, type Pool } from "../../src/db/pool.js";
import { migrate } from "../../src/db/migrate.js";
import { bootstrap, type BootstrapInput, type BootstrapResult } from "../../src/domain/bootstrap.js";

/** Runs at once per round: 20 rounds of 4 are quick and hit the race reliably. */
const RUNS = 4;
const ROUNDS = 20;

describe("bootstrap: concurrent runs for the same names", () => {
  let db: TestDatabase;
  let pool: Pool;

  before(async () => {
    db = await freshDatabase("bootstrap_race");
    await migrate(db.url);
    pool = createPool(db.url, RUNS);
    await bootstrap(pool, { namespace: "existing", application: "seed", queues: ["seed"], eventAccess: false });
  });
  after(async () => {
    await pool?.end();
    await db?.drop();
  });

  /** Starts RUNS bootstraps of `input` together; all must succeed. */
  async function race(input: BootstrapInput): Promise<BootstrapResult[]> {
    const settled = await Promise.allSettled(Array.from({ length: RUNS }, () => bootstrap(pool, input)));
    const failed = settled.filter((s): s is PromiseRejectedResult => s.status === "rejected");
    assert.deepEqual(
      failed.map((f) => String(f.reason)),
      [],
      "every concurrent bootstrap succeeds",
    );
    return settled.map((s) => (s as PromiseFulfilledResult<BootstrapResult>).value);
  }

  async function ids(sql: string, params: unknown[]): Promise<string[]> {
    const [rows] = await pool.query<RowDataPacket[]>(sql, params);
    return rows.map((r) => r.id as string);
  }

  /** Exactly one row per name, every result points at it, and every credential is new and scoped to it. */
  async function assertShared(input: BootstrapInput, out: BootstrapResult[]): Promise<void> {
    const namespaces = await ids("SELECT id FROM namespaces WHERE name = ?", [input.namespace]);
    assert.equal(namespaces.length, 1, "one namespace row");
    const ns = namespaces[0]!;
    const apps = await ids("SELECT id FROM applications WHERE namespace_id = ? AND name = ?", [ns, input.application]);
    assert.equal(apps.length, 1, "one application row");
    const queues = await Promise.all(
      input.queues.map(async (q) => {
        const rows = await ids("SELECT id FROM queues WHERE namespace_id = ? AND name = ?", [ns, q]);
        assert.equal(rows.length, 1, `one queue row for ${q}`);
        return { id: rows[0]!, name: q };
      }),
    );
    assert.equal(new Set(out.map((o) => o.credential_id)).size, RUNS, "a new credential per run");
    for (const o of out) {
      assert.equal(o.namespace_id, ns);
      assert.equal(o.application_id, apps[0]);
      assert.deepEqual(o.queues, queues);
      const [cred] = await pool.query<RowDataPacket[]>(
        "SELECT namespace_id, application_id FROM credentials WHERE id = ?",
        [o.credential_id],
      );
      assert.deepEqual({ ...cred[0] }, { namespace_id: ns, application_id: apps[0] });
      const scope = await ids(
        "SELECT queue_id AS id FROM credential_queues WHERE credential_id = ? ORDER BY queue_id",
        [o.credential_id],
      );
      assert.deepEqual(scope, queues.map((q) => q.id).sort());
    }
  }

  it("a new application and queues in an existing namespace", async () => {
    for (let i = 0; i < ROUNDS; i++) {
      const input = { namespace: "existing", application: `app${i}`, queues: [`q${i}`, `r${i}`], eventAccess: false };
      await assertShared(input, await race(input));
    }
  });

  it("a new queue for an existing application", async () => {
    for (let i = 0; i < ROUNDS; i++) {
      const input = { namespace: "existing", application: "seed", queues: [`only${i}`], eventAccess: true };
      await assertShared(input, await race(input));
    }
  });

  it("a new namespace with everything in it", async () => {
    for (let i = 0; i < ROUNDS; i++) {
      const input = { namespace: `ns${i}`, application: "app", queues: ["q"], eventAccess: false };
      await assertShared(input, await race(input));
    }
  });
});

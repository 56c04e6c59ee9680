// Migrations: applied once each, in order, safely from several processes at once, and a
// database newer than the code is refused.
import { strict as assert } from "node:assert";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { loadMigrations, migrate } from "../../src/db/migrate.js";
import { runCli } from "../helpers/orbit.js";

describe("orbit migrate", () => {
  let db: TestDatabase;
  before(async () => {
    db = await freshDatabase("migrate");
  });
  after(async () => {
    await db.drop();
  });

  it("creates the database and applies every migration once, recording each", async () => {
    const all = await loadMigrations();
    const first = await migrate(db.url);
    assert.deepEqual(first.applied, all.map((m) => m.version));
    const again = await migrate(db.url);
    assert.deepEqual(again.applied, [], "a second run applies nothing");
    const c = await db.connect();
    try {
      const [rows] = await c.query<any[]>("SELECT version, name FROM schema_migrations ORDER BY version");
      assert.deepEqual(rows.map((r) => r.version), all.map((m) => m.version));
      const [tables] = await c.query<any[]>("SHOW TABLES");
      const names = tables.map((t) => Object.values(t)[0]);
      for (const t of ["namespaces", "applications", "credentials", "queues", "credential_queues"]) {
        assert.ok(names.includes(t), `table ${t} exists`);
      }
    } finally {
      await c.end();
    }
  });

  it("is safe when several processes migrate a new database at once", async () => {
    const other = await freshDatabase("migrate_race");
    try {
      const runs = await Promise.all([1, 2, 3, 4].map(() => runCli(["migrate"], { ORBIT_DATABASE_URL: other.url })));
      for (const r of runs) assert.equal(r.code, 0, r.stderr);
      const applied = runs.map((r) => Number(/applied ([0-9]+)/.exec(r.stdout)?.[1]));
      const all = await loadMigrations();
      assert.equal(applied.reduce((a, b) => a + b, 0), all.length, "each migration applied by exactly one process");
      const c = await other.connect();
      try {
        const [rows] = await c.query<any[]>("SELECT COUNT(*) AS n FROM schema_migrations");
        assert.equal(Number(rows[0].n), all.length);
      } finally {
        await c.end();
      }
    } finally {
      await other.drop();
    }
  });

  it("refuses a database that is newer than the code", async () => {
    const c = await db.connect();
    try {
      await c.query("INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'future', UTC_TIMESTAMP(3))");
      await assert.rejects(migrate(db.url), /newer than this code/);
      const res = await runCli(["migrate"], { ORBIT_DATABASE_URL: db.url });
      assert.equal(res.code, 1);
      assert.match(res.stderr, /newer than this code/);
    } finally {
      await c.query("DELETE FROM schema_migrations WHERE version = 999");
      await c.end();
    }
  });

  it("rejects a database URL that is not a plain database name", async () => {
    await assert.rejects(migrate("mysql://root@127.0.0.1:3306/bad`name"), /letters, digits and _/);
    const res = await runCli(["migrate"], { ORBIT_DATABASE_URL: "postgres://x/y" });
    assert.equal(res.code, 1);
    assert.match(res.stderr, /mysql:\/\//);
  });
});

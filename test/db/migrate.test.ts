// Migrations: applied once each, in order, safely from several processes at once, a
// database newer than the code is refused, and a crash between a DDL and its ledger row
// is repaired by the next run.
import { strict as assert } from "node:assert";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import type mysql from "mysql2/promise";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { loadMigrations, migrate, type Migration } from "../../src/db/migrate.js";
import { bootstrap, runCli, startNode, type CliResult } from "../helpers/orbit.js";
import { client, waitSequenced } from "../helpers/api.js";

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
    assert.deepEqual(
      first.applied,
      all.map((m) => m.version),
    );
    const again = await migrate(db.url);
    assert.deepEqual(again.applied, [], "a second run applies nothing");
    const c = await db.connect();
    try {
      const [rows] = await c.query<any[]>("SELECT version, name FROM schema_migrations ORDER BY version");
      assert.deepEqual(
        rows.map((r) => r.version),
        all.map((m) => m.version),
      );
      const [tables] = await c.query<any[]>("SHOW TABLES");
      const names = tables.map((t) => Object.values(t)[0]);
      for (const t of ["namespaces", "applications", "credentials", "queues", "credential_queues"]) {
        assert.ok(names.includes(t), `table ${t} exists`);
      }
    } finally {
      await c.end();
    }
  });

  it("starts the result log empty: a task that ended before its migration gets no fabricated result", async () => {
    // The result log starts with its migration and invents no results of earlier tasks
    // (here the log's migration is result_events). A task CANCELLED before it exists stays
    // without an event.
    const other = await freshDatabase("migrate_log");
    try {
      const all = await loadMigrations();
      const logVersion = all.find((m) => m.name === "result_events")!.version;
      await migrate(
        other.url,
        all.filter((m) => m.version < logVersion),
      );
      const [ns, q, oldTask] = ["a", "b", "c"].map((ch) => ch.repeat(32)) as [string, string, string];
      await other.query("INSERT INTO namespaces (id, name, created_at) VALUES (?, 'ns', UTC_TIMESTAMP(3))", [ns]);
      await other.query(
        "INSERT INTO queues (id, namespace_id, name, created_at) VALUES (?, ?, 'q', UTC_TIMESTAMP(3))",
        [q, ns],
      );
      await other.query(
        `INSERT INTO tasks (id, namespace_id, queue_id, state, revision, attempts, max_attempts, effect_uncertain, input, created_at, updated_at)
         VALUES (?, ?, ?, 'CANCELLED', 2, 0, 3, FALSE, '{}', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3))`,
        [oldTask, ns, q],
      );
      await migrate(other.url);
      const boot = await bootstrap(other.url, {
        namespace: "ns",
        application: "app",
        queues: ["q"],
        eventAccess: true,
      });
      assert.equal(boot.queues[0]!.id, q, "the queue of the old task");
      const node = await startNode(other.url);
      try {
        const api = client(node.url, boot.token);
        assert.equal((await api.get(`/v1/tasks/${oldTask}`)).json.data.state, "CANCELLED");
        const sub = await api.post("/v1/subscriptions", { name: "from-the-start", queue_id: q, from_sequence: "0" });
        assert.equal(sub.status, 201, sub.text);
        assert.equal(sub.json.data.subscription.cursor_sequence, "0");
        const t = (await api.post("/v1/tasks", { queue_id: q, input: 1 })).json.data.task;
        assert.equal((await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" })).status, 200);
        await waitSequenced(other, ns);
        const log = await other.query("SELECT aggregate_id, sequence FROM result_events ORDER BY ticket");
        assert.deepEqual(
          log.map((r) => [r.aggregate_id, String(r.sequence)]),
          [[t.id, "1"]],
          "only the new task's result, first in the log",
        );
      } finally {
        await node.stop();
      }
    } finally {
      await other.drop();
    }
  });

  it("is safe when several processes migrate a new database at once", async () => {
    const other = await freshDatabase("migrate_race");
    try {
      const runs = await Promise.all([1, 2, 3, 4].map(() => runCli(["migrate"], { ORBIT_DATABASE_URL: other.url })));
      for (const r of runs) assert.equal(r.code, 0, r.stderr);
      const applied = runs.map((r) => Number(/applied ([0-9]+)/.exec(r.stdout)?.[1]));
      const all = await loadMigrations();
      assert.equal(
        applied.reduce((a, b) => a + b, 0),
        all.length,
        "each migration applied by exactly one process",
      );
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
      await c.query(
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'future', UTC_TIMESTAMP(3))",
      );
      await assert.rejects(migrate(db.url), /newer than this code/);
      const res = await runCli(["migrate"], { ORBIT_DATABASE_URL: db.url });
      assert.equal(res.code, 1);
      assert.match(res.stderr, /newer than this code/);
      // A node started with --no-migrate (migrations run in a deploy step) refuses it too:
      // otherwise it would serve on a schema it does not know (claims naming dropped indexes).
      for (const args of [[], ["--no-migrate"]]) {
        const started = startNode(db.url, {}, args).then((n) => n.stop());
        await assert.rejects(
          started,
          /orbit serve exited with 1:[\s\S]*the database is at migration 999, newer than this code/,
          args.join(" "),
        );
      }
    } finally {
      await c.query("DELETE FROM schema_migrations WHERE version = 999");
      await c.end();
    }
  });

  it("a node started with --no-migrate that cannot read the ledger refuses to start", async () => {
    // Only a database or ledger not there yet has nothing newer: any other failure to read
    // it (here a server that refuses the connection) leaves the schema unknown, not older.
    const unreachable = "mysql://root@127.0.0.1:1/orbit_never_opened";
    await assert.rejects(
      startNode(unreachable, {}, ["--no-migrate"]).then((n) => n.stop()),
      /orbit serve exited with 1:[\s\S]*ECONNREFUSED/,
    );
  });

  it("rejects a database URL that is not a plain database name", async () => {
    await assert.rejects(migrate("mysql://root@127.0.0.1:3306/bad`name"), /letters, digits and _/);
    const res = await runCli(["migrate"], { ORBIT_DATABASE_URL: "postgres://x/y" });
    assert.equal(res.code, 1);
    assert.match(res.stderr, /mysql:\/\//);
  });
});

/** SHOW CREATE TABLE deliveries: the table every applied-when migration changes. */
async function deliveriesSchema(db: TestDatabase): Promise<string> {
  return String((await db.query("SHOW CREATE TABLE deliveries"))[0]["Create Table"]);
}

async function ledger(db: TestDatabase): Promise<number[]> {
  return (await db.query("SELECT version FROM schema_migrations ORDER BY version")).map((r) => Number(r.version));
}

async function checkAnswer(db: TestDatabase, m: Migration): Promise<number> {
  assert.ok(m.appliedWhen, `migration ${m.version} has an applied-when check`);
  return Number(Object.values((await db.query(m.appliedWhen))[0])[0]);
}

// The migrations that are not re-runnable as they stand (index changes, 000015-18).
const CHECKED = [15, 16, 17, 18, 19, 20];

describe("orbit migrate after a crash between a DDL and its ledger row", () => {
  let all: Migration[];
  let checked: Migration[];
  let reference: string;
  let db: TestDatabase;
  before(async () => {
    all = await loadMigrations();
    checked = CHECKED.map((v) => all[v - 1]!);
    db = await freshDatabase("migrate_crash");
    // The reference schema: every DDL run unconditionally, no check consulted.
    await migrate(
      db.url,
      all.map(({ version, name, sql }) => ({ version, name, sql })),
    );
    reference = await deliveriesSchema(db);
  });
  after(async () => {
    await db.drop();
  });

  it("every migration is re-runnable as it stands or carries an applied-when check", () => {
    for (const m of all) {
      const statement = m.sql.replace(/^--.*$/gm, "").trim();
      const rerunnable = /^CREATE TABLE IF NOT EXISTS /i.test(statement);
      assert.ok(rerunnable !== (m.appliedWhen !== undefined), `migration ${m.version}: exactly one of the two`);
    }
    assert.deepEqual(
      all.filter((m) => m.appliedWhen !== undefined).map((m) => m.version),
      CHECKED,
    );
  });

  it("each check answers 0 right before its migration's DDL and 1 right after", async () => {
    for (const m of checked) {
      await db.drop();
      await migrate(db.url, all.slice(0, m.version - 1));
      assert.equal(await checkAnswer(db, m), 0, `migration ${m.version} before its DDL`);
      await migrate(db.url, all.slice(0, m.version));
      assert.equal(await checkAnswer(db, m), 1, `migration ${m.version} after its DDL`);
    }
  });

  it("the next run records a migration whose DDL took effect, and applies the rest", async () => {
    for (const m of checked) {
      // The state a crash leaves: 1..N-1 recorded, N's DDL done but unrecorded, N+1.. never run.
      await db.drop();
      await migrate(db.url, all.slice(0, m.version));
      await db.query("DELETE FROM schema_migrations WHERE version = ?", [m.version]);
      const res = await migrate(db.url);
      assert.deepEqual(res.recovered, [m.version], `migration ${m.version} recovered`);
      assert.deepEqual(
        res.applied,
        all.slice(m.version).map((x) => x.version),
      );
      assert.deepEqual(
        await ledger(db),
        all.map((x) => x.version),
        "every version recorded once",
      );
      assert.equal(await deliveriesSchema(db), reference, `schema after recovering ${m.version}`);
      assert.deepEqual((await migrate(db.url)).applied, [], "a further run applies nothing");
    }
  });

  it("orbit migrate exits 0 on a database whose newest ledger row is missing", async () => {
    await db.drop();
    await migrate(db.url);
    await db.query("DELETE FROM schema_migrations WHERE version = ?", [all.length]);
    const res = await runCli(["migrate"], { ORBIT_DATABASE_URL: db.url });
    assert.equal(res.code, 0, res.stderr);
    assert.match(res.stdout, /applied 0, recorded 1 already in effect, now at /);
    assert.deepEqual(
      await ledger(db),
      all.map((x) => x.version),
    );
    assert.equal(await deliveriesSchema(db), reference);
  });

  it("a check that errs or answers anything but one row of 0 or 1 stops the run, naming the file", async () => {
    await db.drop();
    await migrate(db.url);
    const next = (appliedWhen: string): Migration[] => [
      ...all,
      {
        version: all.length + 1,
        name: "bad_check",
        sql: "ALTER TABLE deliveries ADD INDEX deliveries_bad (event_id)",
        appliedWhen,
      },
    ];
    const label = `migration ${String(all.length + 1).padStart(6, "0")}_bad_check`;
    await assert.rejects(
      migrate(db.url, next("SELECT EXISTS (SELECT 1 FROM information_schema.no_such_table)")),
      (err: Error) => err.message.startsWith(`${label}: its applied-when check failed: `),
    );
    const unclear = { message: `${label}: its applied-when check must answer one row holding 0 or 1` };
    for (const answer of [
      "SELECT 1 FROM DUAL WHERE FALSE",
      "SELECT NULL",
      "SELECT 2",
      "SELECT 1, 1",
      "SELECT 1 UNION SELECT 0",
    ]) {
      await assert.rejects(migrate(db.url, next(answer)), unclear, answer);
    }
    assert.deepEqual(
      await ledger(db),
      all.map((x) => x.version),
      "nothing recorded",
    );
    assert.equal(await deliveriesSchema(db), reference, "the DDL did not run");
  });

  it("a file whose DDL fails is not recorded, and the next run applies it", async () => {
    // The ledger row comes after the DDL: written first, it would mark as applied a change
    // that never happened, and no later run would make it.
    await db.drop();
    await migrate(db.url);
    const next = (sql: string): Migration[] => [...all, { version: all.length + 1, name: "next", sql }];
    // The error names the file and the server's reason (the operator reads that file next).
    await assert.rejects(
      migrate(db.url, next("ALTER TABLE deliveries ADD INDEX deliveries_next (no_such_column)")),
      (err: Error) =>
        err.message.startsWith(`migration ${String(all.length + 1).padStart(6, "0")}_next failed: `) &&
        err.message.includes("no_such_column"),
    );
    assert.deepEqual(
      await ledger(db),
      all.map((x) => x.version),
      "the failed file is not recorded",
    );
    const res = await migrate(db.url, next("ALTER TABLE deliveries ADD INDEX deliveries_next (event_id)"));
    assert.deepEqual(res.applied, [all.length + 1]);
    assert.match(await deliveriesSchema(db), /KEY `deliveries_next`/);
  });

  it("refuses files numbered with a gap", async () => {
    // A missing number would leave a change out for good: refused, not skipped over.
    const dir = await mkdtemp(path.join(tmpdir(), "orbit-migrations-"));
    try {
      await writeFile(path.join(dir, "000001_first.sql"), "CREATE TABLE IF NOT EXISTS s (c INT);\n");
      await writeFile(path.join(dir, "000003_third.sql"), "CREATE TABLE IF NOT EXISTS t (c INT);\n");
      await assert.rejects(loadMigrations(dir), /numbered without gaps: 000003_third\.sql/);
    } finally {
      await rm(dir, { recursive: true });
    }
  });

  it("refuses a file whose header holds a malformed or second applied-when line", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "orbit-migrations-"));
    try {
      const file = path.join(dir, "000001_bad.sql");
      const headers = [
        "-- applied-when: DROP TABLE t",
        "-- applied-when:",
        "-- applied-when: SELECT 1\n-- applied-when: SELECT 0",
      ];
      for (const header of headers) {
        await writeFile(file, `${header}\nALTER TABLE t ADD INDEX i (c);\n`);
        await assert.rejects(loadMigrations(dir), /000001_bad\.sql: its header must hold at most one/, header);
      }
      // Below the header it is SQL, not a check.
      await writeFile(file, "-- why\nALTER TABLE t ADD INDEX i (c);\n-- applied-when: SELECT 1\n");
      assert.equal((await loadMigrations(dir))[0]!.appliedWhen, undefined);
    } finally {
      await rm(dir, { recursive: true });
    }
  });
});

/** A session of one database as the server lists it (information_schema.processlist). */
interface Session {
  readonly id: number;
  readonly state: string;
  readonly info: string;
}

/** Waiting to write a ledger row. */
const recording = (s: Session): boolean => s.info.startsWith("INSERT INTO schema_migrations");
/** Waiting in GET_LOCK. */
const waitingForLock = (s: Session): boolean => s.state === "User lock";

/**
 * Polls the sessions of `db` (but those in `skip` and `watch`'s own) until one matches
 * `wanted`, or `run` exits first: whichever comes first.
 */
async function sessionOrExit(
  watch: mysql.Connection,
  db: TestDatabase,
  run: Promise<CliResult>,
  wanted: (s: Session) => boolean,
  skip: number[] = [],
): Promise<{ session: Session } | { exited: CliResult }> {
  let exited: CliResult | undefined;
  void run.then((r) => (exited = r));
  for (let i = 0; ; i++) {
    const [rows] = await watch.query<mysql.RowDataPacket[]>(
      "SELECT id, state, info FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()",
      [db.name],
    );
    const sessions = rows.map((r) => ({ id: Number(r.id), state: String(r.state), info: String(r.info ?? "") }));
    const seen = sessions.find((x) => wanted(x) && !skip.includes(x.id));
    if (seen) return { session: seen };
    if (exited) return { exited };
    // A bound on the polls, so that a run stuck elsewhere fails the test instead of holding it.
    assert.ok(i < 1000, `no such session: ${JSON.stringify(sessions)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe("orbit migrate while another run holds the migration lock", () => {
  let all: Migration[];
  let db: TestDatabase;
  before(async () => {
    all = await loadMigrations();
    db = await freshDatabase("migrate_lock");
  });
  after(async () => {
    await db.drop();
  });

  /**
   * Stops an `orbit migrate` inside its run, the lock taken: on a database at 000014, this
   * test's transaction holds the gap of the ledger past 14, so the run waits between
   * 000015's DDL and its ledger row. `during` runs then and may start more runs (`start`);
   * the transaction ends after it. Every run's result, the stopped one's first.
   */
  async function withFirstRunStopped(
    during: (watch: mysql.Connection, first: Session, start: () => Promise<CliResult>) => Promise<void>,
  ): Promise<CliResult[]> {
    await db.drop();
    await migrate(db.url, all.slice(0, 14));
    const holder = await db.connect();
    const runs: Promise<CliResult>[] = [];
    const start = (): Promise<CliResult> => {
      runs.push(runCli(["migrate"], { ORBIT_DATABASE_URL: db.url }));
      return runs[runs.length - 1]!;
    };
    try {
      await holder.query("START TRANSACTION");
      await holder.query("SELECT version FROM schema_migrations WHERE version > 14 FOR UPDATE");
      const seen = await sessionOrExit(holder, db, start(), recording);
      assert.ok("session" in seen, `the first run did not stop at 000015's ledger row: ${JSON.stringify(seen)}`);
      await during(holder, seen.session, start);
    } finally {
      await holder.query("ROLLBACK");
      await holder.end();
      await Promise.allSettled(runs);
    }
    return Promise.all(runs);
  }

  it("a run started while another is inside its run waits for it, then applies nothing", async () => {
    const [first, second] = await withFirstRunStopped(async (watch, stopped, start) => {
      // It waits for the lock before reading the ledger: else it would find 000015 unrecorded
      // and go on to record it too.
      const seen = await sessionOrExit(watch, db, start(), (s) => waitingForLock(s) || recording(s), [stopped.id]);
      assert.ok(
        "session" in seen && waitingForLock(seen.session),
        `the second run did not wait for the lock: ${JSON.stringify(seen)}`,
      );
    });
    assert.equal(first!.code, 0, first!.stderr);
    assert.equal(second!.code, 0, second!.stderr);
    assert.match(first!.stdout, new RegExp(`applied ${all.length - 14}, now at ${all.length}`));
    assert.match(second!.stdout, new RegExp(`applied 0, now at ${all.length}`), "the second found every file recorded");
    assert.deepEqual(
      await ledger(db),
      all.map((x) => x.version),
    );
  });

  it("a run that does not get the lock (its wait ended by KILL QUERY) exits 1 and runs nothing", async () => {
    // GET_LOCK answers NULL when its wait is killed, 0 on its timeout: neither is the lock.
    const [first, second] = await withFirstRunStopped(async (watch, stopped, start) => {
      const run = start();
      const waiting = await sessionOrExit(watch, db, run, waitingForLock, [stopped.id]);
      assert.ok("session" in waiting, `the second run did not wait for the lock: ${JSON.stringify(waiting)}`);
      await watch.query(`KILL QUERY ${waiting.session.id}`);
      // Without the lock it must not go on to the files (and wait to record 000015 too).
      const seen = await sessionOrExit(watch, db, run, recording, [stopped.id]);
      assert.ok("exited" in seen, "the second run went on without the lock");
    });
    assert.equal(second!.code, 1);
    assert.match(second!.stderr, /could not take the migration lock/);
    assert.equal(first!.code, 0, first!.stderr);
    assert.deepEqual(
      await ledger(db),
      all.map((x) => x.version),
    );
  });
});

// Applies the numbered SQL files in migrations/ once each, in order, recording each in
// a ledger table. Several nodes may start at once: the runner holds a named database
// lock (GET_LOCK) for the whole run, because MySQL DDL commits implicitly and cannot sit
// inside one transaction with its ledger row. So a node killed between a file's DDL and
// its ledger row leaves that DDL in effect, unrecorded; the next run must repair this,
// which each file allows in one of two ways:
//   - its statement is re-runnable as it stands (CREATE TABLE IF NOT EXISTS: 000001-14);
//   - or it carries a header line `-- applied-when: SELECT …`, one query on
//     information_schema answering 1 once the DDL has taken effect and 0 before it
//     (given the earlier files applied and the later ones not, the only state a crash
//     leaves: the runner never starts a file before the previous one is recorded). For
//     index changes (000015-18) there is no other way: MySQL 8 has no ADD INDEX IF NOT
//     EXISTS or DROP INDEX IF EXISTS. An ALTER is atomic (InnoDB, MySQL 8 and MariaDB
//     10.6+), so after a crash it has taken effect entirely or not at all.
// For a file not in the ledger, the runner asks its check first: on 1 it only writes the
// ledger row; on 0 it runs the DDL; anything else (an error, no row, NULL) stops the run,
// naming the file, rather than guess. A database that has migrations this code does not
// know is refused: an older node must not serve a newer schema.
import { readdir, readFile } from "node:fs/promises";
import path from "node:path";
import mysql from "mysql2/promise";
import type { RowDataPacket } from "mysql2/promise";
import { ensureDatabase, parseDatabaseUrl } from "./pool.js";
import { MIGRATIONS_DIR } from "../config/paths.js";

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
  /** The `-- applied-when:` query: 1 once this file's DDL has taken effect, else 0. */
  readonly appliedWhen?: string;
}

const APPLIED_WHEN = "-- applied-when:";

const LOCK_NAME = "orbit.migrate";
const LOCK_TIMEOUT_S = 60;

export { MIGRATIONS_DIR };

export async function loadMigrations(dir: string = MIGRATIONS_DIR): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((f) => f.endsWith(".sql")).sort();
  const out: Migration[] = [];
  for (const file of files) {
    const m = /^([0-9]{6})_([a-z0-9_]+)\.sql$/.exec(file);
    if (!m) throw new Error(`migration file name must be NNNNNN_name.sql: ${file}`);
    const version = Number(m[1]);
    if (version !== out.length + 1) throw new Error(`migrations must be numbered without gaps: ${file}`);
    const sql = await readFile(path.join(dir, file), "utf8");
    out.push({ version, name: m[2]!, sql, ...appliedWhenOf(sql, file) });
  }
  return out;
}

/** The file's `-- applied-when:` check, looked for in its leading comment lines only. */
function appliedWhenOf(sql: string, file: string): { appliedWhen?: string } {
  const header: string[] = [];
  for (const line of sql.split("\n")) {
    if (!line.startsWith("--")) break;
    header.push(line);
  }
  const checks = header.filter((l) => l.startsWith(APPLIED_WHEN)).map((l) => l.slice(APPLIED_WHEN.length).trim());
  if (checks.length === 0) return {};
  if (checks.length > 1 || !/^SELECT\s/i.test(checks[0]!)) {
    throw new Error(`migration ${file}: its header must hold at most one "${APPLIED_WHEN} SELECT …" line`);
  }
  return { appliedWhen: checks[0]! };
}

export interface MigrateResult {
  /** Versions whose DDL this run executed. */
  readonly applied: number[];
  /** Versions found already in effect (a crash after their DDL): only recorded now. */
  readonly recovered: number[];
  readonly current: number;
}

export async function migrate(databaseUrl: string, migrations?: Migration[]): Promise<MigrateResult> {
  const target = parseDatabaseUrl(databaseUrl);
  const all = migrations ?? (await loadMigrations());
  await ensureDatabase(target);
  const conn = await mysql.createConnection({ uri: databaseUrl, timezone: "Z", multipleStatements: false });
  try {
    const [lock] = await conn.query<RowDataPacket[]>("SELECT GET_LOCK(?, ?) AS got", [LOCK_NAME, LOCK_TIMEOUT_S]);
    if (lock[0]?.got !== 1)
      throw new Error(`could not take the migration lock (another run holds it; waited up to ${LOCK_TIMEOUT_S} s)`);
    try {
      return await applyPending(conn, all);
    } finally {
      await conn.query("SELECT RELEASE_LOCK(?)", [LOCK_NAME]);
    }
  } finally {
    await conn.end();
  }
}

async function applyPending(conn: mysql.Connection, all: Migration[]): Promise<MigrateResult> {
  await conn.query(
    `CREATE TABLE IF NOT EXISTS schema_migrations (
       version    INT UNSIGNED NOT NULL PRIMARY KEY,
       name       VARCHAR(200) NOT NULL,
       applied_at DATETIME(3)  NOT NULL
     ) ENGINE = InnoDB`,
  );
  const [rows] = await conn.query<RowDataPacket[]>("SELECT version FROM schema_migrations ORDER BY version");
  const done = new Set(rows.map((r) => Number(r.version)));
  refuseNewer(Math.max(0, ...done), all.length);
  const applied: number[] = [];
  const recovered: number[] = [];
  for (const m of all) {
    if (done.has(m.version)) continue;
    if (await alreadyInEffect(conn, m)) {
      recovered.push(m.version);
    } else {
      await runDdl(conn, m);
      applied.push(m.version);
    }
    await conn.query("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(3))", [
      m.version,
      m.name,
    ]);
  }
  return { applied, recovered, current: all.length };
}

function refuseNewer(newest: number, known: number): void {
  if (newest > known) {
    throw new Error(`the database is at migration ${newest}, newer than this code (${known}); refusing to run`);
  }
}

/**
 * `orbit serve --no-migrate` (migrations run in a deploy step): nothing is applied, but a
 * database newer than this code is refused all the same. A database that does not exist
 * yet, or has no ledger yet, has nothing newer.
 */
export async function checkNotNewer(databaseUrl: string, migrations?: Migration[]): Promise<void> {
  parseDatabaseUrl(databaseUrl);
  const all = migrations ?? (await loadMigrations());
  let newest = 0;
  try {
    const conn = await mysql.createConnection({ uri: databaseUrl, timezone: "Z", multipleStatements: false });
    try {
      const [rows] = await conn.query<RowDataPacket[]>("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations");
      newest = Number(rows[0]?.v ?? 0);
    } finally {
      await conn.end();
    }
  } catch (e) {
    const code = (e as { code?: unknown }).code;
    if (code !== "ER_NO_SUCH_TABLE" && code !== "ER_BAD_DB_ERROR") throw e;
  }
  refuseNewer(newest, all.length);
}

const labelOf = (m: Migration) => `migration ${String(m.version).padStart(6, "0")}_${m.name}`;

/**
 * A file's statement. Its failure names the file and the server's reason: the operator's
 * next step is to read that file (the CLI prints a bare driver error as its code alone).
 */
async function runDdl(conn: mysql.Connection, m: Migration): Promise<void> {
  try {
    await conn.query(m.sql);
  } catch (err) {
    throw new Error(`${labelOf(m)} failed: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * Whether an unrecorded migration's DDL has already taken effect, by its applied-when
 * check (false without one: its statement is re-runnable). Only an answer of exactly one
 * row holding 0 or 1 counts: a check that errs or answers otherwise stops the run, since
 * guessing "applied" would skip the DDL for good.
 */
async function alreadyInEffect(conn: mysql.Connection, m: Migration): Promise<boolean> {
  if (m.appliedWhen === undefined) return false;
  const label = labelOf(m);
  let rows: unknown[][];
  try {
    // As arrays: rows as objects would merge two columns of the same name into one.
    [rows] = await conn.query<RowDataPacket[][]>({ sql: m.appliedWhen, rowsAsArray: true });
  } catch (err) {
    throw new Error(`${label}: its applied-when check failed: ${(err as Error).message}`, { cause: err });
  }
  const values = rows.length === 1 ? rows[0]! : [];
  const answer = values.length === 1 && values[0] !== null ? Number(values[0]) : NaN;
  if (answer !== 0 && answer !== 1) {
    throw new Error(`${label}: its applied-when check must answer one row holding 0 or 1`);
  }
  return answer === 1;
}

/** The newest migration recorded in the database (0 before the first run). */
export async function appliedVersion(db: import("mysql2/promise").Pool): Promise<number> {
  const [rows] = await db.query<RowDataPacket[]>("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations");
  return Number(rows[0]?.v ?? 0);
}

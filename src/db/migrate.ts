// Applies the numbered SQL files in migrations/ once each, in order, recording each in
// a ledger table. Several nodes may start at once: the runner holds a named database
// lock (GET_LOCK) for the whole run, because MySQL DDL commits implicitly and cannot sit
// inside one transaction with its ledger row. Each file holds one DDL statement written
// to be re-runnable (IF NOT EXISTS), so a crash between the DDL and its ledger row is
// repaired by the next run. A database that has migrations this code does not know is
// refused: an older node must not serve a newer schema.
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
}

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
    out.push({ version, name: m[2]!, sql: await readFile(path.join(dir, file), "utf8") });
  }
  return out;
}

export interface MigrateResult {
  readonly applied: number[];
  readonly current: number;
}

export async function migrate(databaseUrl: string, migrations?: Migration[]): Promise<MigrateResult> {
  const target = parseDatabaseUrl(databaseUrl);
  const all = migrations ?? (await loadMigrations());
  await ensureDatabase(target);
  const conn = await mysql.createConnection({ uri: databaseUrl, timezone: "Z", multipleStatements: false });
  try {
    const [lock] = await conn.query<RowDataPacket[]>("SELECT GET_LOCK(?, ?) AS got", [LOCK_NAME, LOCK_TIMEOUT_S]);
    if (lock[0]?.got !== 1) throw new Error(`could not take the migration lock within ${LOCK_TIMEOUT_S} s`);
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
  const newest = Math.max(0, ...done);
  if (newest > all.length) {
    throw new Error(`the database is at migration ${newest}, newer than this code (${all.length}); refusing to run`);
  }
  const applied: number[] = [];
  for (const m of all) {
    if (done.has(m.version)) continue;
    await conn.query(m.sql);
    await conn.query("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(3))", [
      m.version,
      m.name,
    ]);
    applied.push(m.version);
  }
  return { applied, current: all.length };
}

/** The newest migration recorded in the database (0 before the first run). */
export async function appliedVersion(db: import("mysql2/promise").Pool): Promise<number> {
  const [rows] = await db.query<RowDataPacket[]>("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations");
  return Number(rows[0]?.v ?? 0);
}

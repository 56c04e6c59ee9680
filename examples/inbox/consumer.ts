// The MySQL Inbox consumer (spec §6, §8): for every delivered event, ONE local
// transaction inserts event.id into an inbox table (unique key) together with the
// business effect, and commits; only then does the SDK ACK. A duplicate delivery (after
// a crash, a lost ACK answer, an expired lease) finds the event in the inbox, skips the
// effect and is ACKed with its new proof. Killing this process at any moment loses
// nothing and applies nothing twice.
//
// Environment: ORBIT_URL, ORBIT_TOKEN, SUBSCRIPTION_ID, INBOX_DATABASE_URL
// (default mysql://root@127.0.0.1:3306/orbit_inbox_example), CAPACITY (default 8).
import path from "node:path";
import { fileURLToPath } from "node:url";
import mysql from "mysql2/promise";
import type { ResultSetHeader } from "mysql2/promise";
import { Consumer, type ResultEvent } from "orbit";

const INBOX_URL = process.env.INBOX_DATABASE_URL ?? "mysql://root@127.0.0.1:3306/orbit_inbox_example";

export async function openInbox(url = INBOX_URL): Promise<mysql.Pool> {
  const u = new URL(url);
  const database = u.pathname.slice(1);
  u.pathname = "/";
  const admin = await mysql.createConnection({ uri: u.toString() });
  await admin.query(`CREATE DATABASE IF NOT EXISTS \`${database}\``);
  await admin.end();
  const pool = mysql.createPool({ uri: url, connectionLimit: 4 });
  // The inbox: one row per event ever applied. The unique key is what dedupes.
  await pool.query(`CREATE TABLE IF NOT EXISTS inbox (
    event_id CHAR(32) NOT NULL PRIMARY KEY, sequence BIGINT UNSIGNED NOT NULL, task_id CHAR(32) NOT NULL,
    received_at DATETIME(3) NOT NULL) ENGINE = InnoDB`);
  // The business effect: a counter per outcome. Not idempotent by itself, on purpose.
  await pool.query(`CREATE TABLE IF NOT EXISTS outcome_totals (
    state VARCHAR(16) NOT NULL PRIMARY KEY, n BIGINT UNSIGNED NOT NULL) ENGINE = InnoDB`);
  return pool;
}

/** Applies one event exactly once; returns false when it was already in the inbox. */
export async function applyOnce(pool: mysql.Pool, event: ResultEvent): Promise<boolean> {
  const conn = await pool.getConnection();
  try {
    await conn.beginTransaction();
    const [r] = await conn.query<ResultSetHeader>(
      "INSERT IGNORE INTO inbox (event_id, sequence, task_id, received_at) VALUES (?, ?, ?, UTC_TIMESTAMP(3))",
      [event.id, event.sequence, event.aggregate_id],
    );
    const fresh = r.affectedRows === 1;
    if (fresh) {
      await conn.query("INSERT INTO outcome_totals (state, n) VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1", [event.snapshot.state]);
    }
    await conn.commit();
    return fresh;
  } catch (e) {
    await conn.rollback().catch(() => undefined);
    throw e;
  } finally {
    conn.release();
  }
}

async function main(): Promise<void> {
  const { ORBIT_URL = "http://127.0.0.1:8080", ORBIT_TOKEN, SUBSCRIPTION_ID } = process.env;
  if (!ORBIT_TOKEN || !SUBSCRIPTION_ID) throw new Error("set ORBIT_TOKEN and SUBSCRIPTION_ID");
  const pool = await openInbox();
  const consumer = new Consumer({
    baseUrl: ORBIT_URL,
    token: ORBIT_TOKEN,
    subscriptionId: SUBSCRIPTION_ID,
    capacity: Number(process.env.CAPACITY ?? 8),
    onError: (e) => process.stderr.write(`inbox consumer: ${e instanceof Error ? e.message : String(e)}\n`),
    handler: async (event) => {
      const fresh = await applyOnce(pool, event);
      process.stdout.write(`${fresh ? "applied" : "duplicate, skipped"} ${event.id} #${event.sequence} ${event.type}\n`);
    },
  }).start();
  const stop = () => void consumer.stop({ deadlineMs: 5000 });
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
  const end = await consumer.done;
  await pool.end();
  if (!end.stopped) {
    process.stderr.write(`inbox consumer stopped: ${end.error.message}\n`);
    process.exitCode = 1;
  }
}

// Run as a program (not imported by the demo or the kill test).
if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  main().catch((e: unknown) => {
    process.stderr.write(`inbox consumer: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exitCode = 1;
  });
}

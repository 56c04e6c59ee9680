// The MySQL Inbox consumer (docs/protocol.md §6, §8): for every delivered event, ONE local
// transaction inserts event.id into an inbox table (unique key) together with the
// business effect, and commits; only then does the SDK ACK. A duplicate delivery (after
// a crash, a lost ACK answer, an expired lease) finds the event in the inbox, skips the
// effect and is ACKed with its new proof. Killing this process at any moment loses
// nothing and applies nothing twice. At a stop it saves the proofs whose ACK was not
// confirmed, and the next run ACKs with them (docs/protocol.md §7).
//
// Environment: ORBIT_URL (one node, or several separated by commas: after a lost
// connection the next is tried), ORBIT_TOKEN, SUBSCRIPTION_ID, INBOX_DATABASE_URL
// (default mysql://root@127.0.0.1:3306/orbit_inbox_example), CAPACITY (default 8).
import path from "node:path";
import { fileURLToPath } from "node:url";
import mysql from "mysql2/promise";
import type { ResultSetHeader, RowDataPacket } from "mysql2/promise";
import { Consumer, type Proof, type ResultEvent } from "@orbit-events/sdk";

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
  // ACK proofs whose answer never came, saved at stop for the next run (protocol §7).
  await pool.query(`CREATE TABLE IF NOT EXISTS unconfirmed_proofs (
    subscription_id CHAR(32) NOT NULL, delivery_id CHAR(32) NOT NULL, epoch VARCHAR(20) NOT NULL,
    lease_secret CHAR(43) NOT NULL, PRIMARY KEY (subscription_id, delivery_id)) ENGINE = InnoDB`);
  return pool;
}

/** The proofs the last run of this subscription's consumer could not get confirmed. */
export async function loadProofs(pool: mysql.Pool, subscriptionId: string): Promise<Proof[]> {
  const [rows] = await pool.query<RowDataPacket[]>(
    "SELECT delivery_id, epoch, lease_secret FROM unconfirmed_proofs WHERE subscription_id = ?",
    [subscriptionId],
  );
  return rows.map((r) => ({
    delivery_id: r.delivery_id as string,
    epoch: r.epoch as string,
    lease_secret: r.lease_secret as string,
  }));
}

/**
 * Replaces the saved proofs with those still unconfirmed, in one local transaction: the
 * ones the last run was given and this one got confirmed go, so the table never grows.
 */
export async function saveProofs(pool: mysql.Pool, subscriptionId: string, proofs: readonly Proof[]): Promise<void> {
  const conn = await pool.getConnection();
  try {
    await conn.beginTransaction();
    await conn.query("DELETE FROM unconfirmed_proofs WHERE subscription_id = ?", [subscriptionId]);
    if (proofs.length > 0) {
      await conn.query("INSERT INTO unconfirmed_proofs (subscription_id, delivery_id, epoch, lease_secret) VALUES ?", [
        proofs.map((p) => [subscriptionId, p.delivery_id, p.epoch, p.lease_secret]),
      ]);
    }
    await conn.commit();
  } catch (e) {
    await conn.rollback().catch(() => undefined);
    throw e;
  } finally {
    conn.release();
  }
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
      await conn.query("INSERT INTO outcome_totals (state, n) VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1", [
        event.snapshot.state,
      ]);
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
  try {
    await consume(pool, ORBIT_URL.split(","), ORBIT_TOKEN, SUBSCRIPTION_ID);
  } finally {
    // However the run ends — a saved proof or an id the SDK refuses, a refused token, a
    // failed save — the pool is closed: its idle connections would keep the process alive
    // for ever, and a supervisor waiting for it to exit would wait with it.
    await pool.end();
  }
}

async function consume(pool: mysql.Pool, baseUrl: string[], token: string, subscriptionId: string): Promise<void> {
  // docs/protocol.md §7: a client closing first finishes its own durable save and saves its
  // un-reconciled ACK proofs, then closes. An event whose effect this run committed but
  // whose ACK went unanswered is ACKed with its saved proof as soon as the next run
  // connects, instead of being delivered again when its lease runs out (30 s by default),
  // an attempt of its budget spent. A SIGKILL saves nothing and loses nothing: the delivery
  // comes back and the inbox skips it. A proof replaced meanwhile is answered
  // DELIVERY_LEASE_LOST and dropped by the SDK; the redelivery carries the new one. A saved
  // row the SDK refuses (edited by hand) ends the run before it connects and stays for an
  // operator to read.
  const consumer = new Consumer({
    proofs: await loadProofs(pool, subscriptionId),
    baseUrl,
    token,
    subscriptionId,
    capacity: Number(process.env.CAPACITY ?? 8),
    onError: (e) => process.stderr.write(`inbox consumer: ${e instanceof Error ? e.message : String(e)}\n`),
    // The node confirmed the ACK: durable, and this delivery will not come again.
    onAck: (r) => process.stdout.write(`ACK confirmed ${r.delivery_id} epoch ${r.epoch}\n`),
    handler: async (event) => {
      const fresh = await applyOnce(pool, event);
      process.stdout.write(
        `${fresh ? "applied" : "duplicate, skipped"} ${event.id} #${event.sequence} ${event.type}\n`,
      );
    },
  }).start();
  // Its inbox is open and its saved proofs are read: a supervisor can tell a start that
  // failed (its database down: exit 1 before this line) from a consumer that runs.
  process.stdout.write(`consuming subscription ${subscriptionId}\n`);
  // At a stop the proofs are saved before the connection closes (protocol §7: save the
  // unconfirmed ACK proofs, then close); a failed save is stop()'s rejection, thrown here.
  let stopping: Promise<unknown> | undefined;
  const stop = () => {
    stopping ??= consumer.stop({ deadlineMs: 5000, saveProofs: (proofs) => saveProofs(pool, subscriptionId, proofs) });
    stopping.catch(() => undefined); // awaited below, after `done`
  };
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
  const end = await consumer.done;
  // Ended by the node instead (a code the SDK does not retry): its connection is closed already.
  if (stopping) await stopping;
  else await saveProofs(pool, subscriptionId, consumer.unconfirmedProofs());
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

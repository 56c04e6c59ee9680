// The database's own limits, measured in the same run as Orbit so the ratios compare like
// with like: `db.commit` — raw durable one-row commits — and `db.cycle8` — the
// minimal hand-written lease-8 / ACK-8 loop a hand-rolled delivery engine would run.
//
// Both talk to MariaDB directly through mysql2's promise API, 16 connections (the most that
// keep a 2-core database busy without only adding contention), on a fresh database
// `orbit_bench_db_<pid>` that is dropped afterwards.
import { createHash, randomBytes } from "node:crypto";
import mysql from "mysql2/promise";
import type { Connection, ResultSetHeader, RowDataPacket } from "mysql2/promise";
import { cpuSeconds, percentile, type BenchOptions } from "./common.js";

const CONNECTIONS = 16;
const BATCH = 8;
const WARMUP_SECONDS = 1;
/** Orbit's default ORBIT_LEASE_DURATION_MS; only stored, never waited for. */
const LEASE_MS = 30_000;

export interface DbCommitResult {
  commitsPerSec: number;
  /** Latency of one autocommit UPDATE round trip, measured window only. */
  p50Ms: number;
  p99Ms: number;
  connections: 16;
  /** The measured window of the reported run (warm-up excluded). */
  seconds: number;
  /** CPU seconds this process used in that window. */
  cpuSeconds: number;
  /** The rate of every run, in run order; the reported figures are the median run's. */
  runs: number[];
}

export interface DbCycleResult {
  /** ACKed rows per second. */
  deliveriesPerSec: number;
  connections: 16;
  batch: 8;
  /** One lease transaction + one ACK commit for 8 rows. */
  batchP50Ms: number;
  batchP99Ms: number;
  seconds: number;
  cpuSeconds: number;
  runs: number[];
}

/** quick: one 5 s window; full: three 10 s windows, median. */
function plan(o: BenchOptions): { runs: number; seconds: number } {
  return o.quick ? { runs: 1, seconds: 5 } : { runs: 3, seconds: 10 };
}

/**
 * `db.commit`: each of 16 connections updates its own row in a loop, autocommit, so every
 * statement is one durable commit (innodb_flush_log_at_trx_commit=1). Own rows mean no row
 * lock waits: what is left is the per-commit CPU and the server's group commit — the
 * commit limit.
 */
export async function measureDbCommit(o: BenchOptions): Promise<DbCommitResult> {
  return withBenchDatabase(o, async (conns) => {
    await conns[0]!.query("CREATE TABLE commit_rows (id INT PRIMARY KEY, n BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB");
    await conns[0]!.query("INSERT INTO commit_rows (id, n) VALUES ?", [conns.map((_, k) => [k, 0])]);
    const { runs, seconds } = plan(o);
    const results: Window[] = [];
    for (let r = 0; r < runs; r++) {
      results.push(
        await runWindow(conns, seconds, async (conn, k) => {
          await conn.query("UPDATE commit_rows SET n = n + 1 WHERE id = ?", [k]);
          return 1;
        }),
      );
    }
    const m = medianRun(results);
    return {
      commitsPerSec: m.rate,
      p50Ms: percentile(m.latencies, 50),
      p99Ms: percentile(m.latencies, 99),
      connections: CONNECTIONS,
      seconds: m.seconds,
      cpuSeconds: m.cpuSeconds,
      runs: results.map((w) => w.rate),
    };
  });
}

/**
 * `db.cycle8`: the hand-written loop that scales: decide which rows to lease from a plain
 * index read, lease them by primary key with a guarded UPDATE checking the affected-row
 * count, and ACK 8 in one statement.
 *
 * Worker k owns the rows whose id starts with hex digit k (row i gets digit i mod 16), so the
 * 16 workers never contend for a row and no SKIP LOCKED is needed (SKIP LOCKED scans of one
 * head collapse as connections grow).
 */
export async function measureDbCycle8(o: BenchOptions): Promise<DbCycleResult> {
  return withBenchDatabase(o, async (conns) => {
    await conns[0]!.query(`CREATE TABLE deliveries (
        id              CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
        subscription_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
        state           ENUM('PENDING', 'LEASED', 'ACKED') NOT NULL,
        lease_epoch     BIGINT UNSIGNED NOT NULL,
        lease_until     DATETIME(3) NULL,
        secret_digest   BINARY(32) NULL,
        PRIMARY KEY (id),
        KEY deliveries_claim (subscription_id, state, id)
      ) ENGINE=InnoDB`);
    const { runs, seconds } = plan(o);
    const results: Window[] = [];
    for (let r = 0; r < runs; r++) {
      // Each run gets its own subscription and backlog, so no run starts on the previous
      // run's leftovers (or waits for a reset of hundreds of thousands of rows).
      const subscriptionId = randomBytes(16).toString("hex");
      await prefill(conns, subscriptionId, Math.ceil(MAX_EXPECTED_RATE * (WARMUP_SECONDS + seconds)));
      let exhausted = false;
      results.push(
        await runWindow(conns, seconds, async (conn, k) => {
          const n = await leaseAndAck(conn, subscriptionId, k.toString(16));
          if (n === 0) exhausted = true;
          return n;
        }),
      );
      // A worker that ran dry would make the figure a lie, not a limit.
      if (exhausted) throw new Error("db.cycle8: the prefilled backlog ran out; raise MAX_EXPECTED_RATE");
    }
    const m = medianRun(results);
    return {
      deliveriesPerSec: m.rate,
      connections: CONNECTIONS,
      batch: BATCH,
      batchP50Ms: percentile(m.latencies, 50),
      batchP99Ms: percentile(m.latencies, 99),
      seconds: m.seconds,
      cpuSeconds: m.cpuSeconds,
      runs: results.map((w) => w.rate),
    };
  });
}

/** Backlog size: 25,000/s — well above what this loop reaches — times warm-up + window. */
const MAX_EXPECTED_RATE = 25_000;

async function prefill(conns: Connection[], subscriptionId: string, rows: number): Promise<void> {
  const CHUNK = 2_000;
  let next = 0;
  // A few connections in parallel; this is set-up, not measured.
  await Promise.all(
    conns.slice(0, 4).map(async (conn) => {
      while (next < rows) {
        const from = next;
        next = Math.min(rows, next + CHUNK);
        const values = [];
        for (let i = from; i < next; i++) {
          const id = (i % CONNECTIONS).toString(16) + randomBytes(16).toString("hex").slice(1);
          values.push([id, subscriptionId, "PENDING", 0]);
        }
        await conn.query("INSERT INTO deliveries (id, subscription_id, state, lease_epoch) VALUES ?", [values]);
      }
    }),
  );
}

/** One lease transaction and one ACK commit for up to 8 rows of worker `digit`; returns rows ACKed. */
async function leaseAndAck(conn: Connection, subscriptionId: string, digit: string): Promise<number> {
  await conn.beginTransaction();
  // The plain indexed read that decides what to lease: a range of deliveries_claim. FORCE
  // INDEX because MariaDB otherwise picks the primary key range for `id LIKE`, which walks
  // every row the worker already ACKed and so slows down as the run goes on.
  const [rows] = await conn.query<RowDataPacket[]>(
    `SELECT id, lease_epoch FROM deliveries FORCE INDEX (deliveries_claim)
      WHERE subscription_id = ? AND state = 'PENDING' AND id LIKE ? ORDER BY id LIMIT ${BATCH}`,
    [subscriptionId, `${digit}%`],
  );
  if (rows.length === 0) {
    await conn.rollback();
    return 0;
  }
  const ids = rows.map((r) => r.id as string);
  // A fresh secret per delivery, only its SHA-256 stored — what Orbit's lease does too, and
  // part of the client's cost per delivery.
  const digests = ids.map(() => createHash("sha256").update(randomBytes(32)).digest());
  const [lease] = await conn.query<ResultSetHeader>(
    `UPDATE deliveries
        SET state = 'LEASED', lease_epoch = lease_epoch + 1, lease_until = ?,
            secret_digest = CASE id ${ids.map(() => "WHEN ? THEN ?").join(" ")} END
      WHERE id IN (?) AND state = 'PENDING'`,
    [new Date(Date.now() + LEASE_MS), ...ids.flatMap((id, i) => [id, digests[i]]), ids],
  );
  // The guard: a row another leaser took in between would not count.
  if (lease.affectedRows !== ids.length) throw new Error("db.cycle8: a lease lost its row");
  await conn.commit();

  // The ACK of all 8 in one statement, each row checked against the epoch its lease gave it.
  // Autocommit: the single statement is its own durable transaction, committed on return.
  const [ack] = await conn.query<ResultSetHeader>(
    `UPDATE deliveries SET state = 'ACKED'
      WHERE id IN (?) AND state = 'LEASED'
        AND lease_epoch = CASE id ${ids.map(() => "WHEN ? THEN ?").join(" ")} END`,
    [ids, ...rows.flatMap((r) => [r.id as string, BigInt(r.lease_epoch as string) + 1n])],
  );
  if (ack.affectedRows !== ids.length) throw new Error("db.cycle8: an ACK did not match its lease");
  return ack.affectedRows;
}

// ---- shared machinery ----

interface Window {
  /** Units (commits or ACKed rows) per second. */
  rate: number;
  /** Milliseconds per step, ascending. */
  latencies: number[];
  seconds: number;
  cpuSeconds: number;
}

/**
 * Runs `step` back to back on every connection: WARMUP_SECONDS unmeasured (connections,
 * buffer pool and JIT settle), then `seconds` measured. A step counts only if it ends inside
 * the window; steps still running at its end finish uncounted.
 */
async function runWindow(
  conns: Connection[],
  seconds: number,
  step: (conn: Connection, k: number) => Promise<number>,
): Promise<Window> {
  let phase: "warm" | "measure" | "stop" = "warm";
  let units = 0;
  let failure: { error: unknown } | undefined;
  const latencies: number[] = [];
  const workers = conns.map(async (conn, k) => {
    try {
      while (phase !== "stop") {
        const t = performance.now();
        const n = await step(conn, k);
        if (n === 0) return; // nothing left to do (db.cycle8 checks this)
        if (phase === "measure") {
          units += n;
          latencies.push(performance.now() - t);
        }
      }
    } catch (error) {
      // Kept, not left unhandled while the timers run; the others stop at their next step.
      failure ??= { error };
      phase = "stop";
    }
  });
  await sleep(WARMUP_SECONDS * 1000);
  phase = "measure";
  const t0 = performance.now();
  const c0 = cpuSeconds();
  await sleep(seconds * 1000);
  phase = "stop";
  const wall = (performance.now() - t0) / 1000;
  const cpu = cpuSeconds() - c0;
  await Promise.all(workers);
  if (failure) throw failure.error;
  latencies.sort((a, b) => a - b);
  return { rate: units / wall, latencies, seconds: wall, cpuSeconds: cpu };
}

function medianRun(runs: Window[]): Window {
  return [...runs].sort((a, b) => a.rate - b.rate)[Math.floor(runs.length / 2)]!;
}

/** Creates `orbit_bench_db_<pid>`, opens 16 connections to it, and drops it afterwards. */
async function withBenchDatabase<T>(o: BenchOptions, fn: (conns: Connection[]) => Promise<T>): Promise<T> {
  const database = `orbit_bench_db_${process.pid}`;
  const admin = await mysql.createConnection({ uri: o.mysqlUrl });
  const conns: Connection[] = [];
  try {
    await admin.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await admin.query(`CREATE DATABASE \`${database}\``);
    const url = new URL(o.mysqlUrl);
    url.pathname = `/${database}`;
    for (let k = 0; k < CONNECTIONS; k++) {
      conns.push(
        await mysql.createConnection({
          uri: url.toString(),
          timezone: "Z",
          supportBigNumbers: true,
          bigNumberStrings: true,
        }),
      );
    }
    return await fn(conns);
  } finally {
    await Promise.allSettled(conns.map((c) => c.end()));
    await admin.query(`DROP DATABASE IF EXISTS \`${database}\``).catch(() => undefined);
    await admin.end();
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

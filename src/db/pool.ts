// The mysql2 pool and the one place that knows how to reach the database.
import mysql from "mysql2/promise";
import type { Pool, PoolOptions } from "mysql2/promise";

export type { Pool, PoolConnection } from "mysql2/promise";

export interface DatabaseTarget {
  readonly url: string;
  readonly database: string;
}

/** Splits ORBIT_DATABASE_URL into the server URL and the database name, validated. */
export function parseDatabaseUrl(url: string): DatabaseTarget {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new Error("ORBIT_DATABASE_URL is not a URL");
  }
  if (u.protocol !== "mysql:") throw new Error("ORBIT_DATABASE_URL must use mysql://");
  const database = decodeURIComponent(u.pathname.replace(/^\//, ""));
  // The name goes into CREATE DATABASE, so it is held to a plain identifier.
  if (!/^[A-Za-z0-9_]{1,64}$/.test(database)) {
    throw new Error("ORBIT_DATABASE_URL must name a database of letters, digits and _");
  }
  return { url, database };
}

function baseOptions(url: string): PoolOptions {
  return {
    uri: url,
    // BIGINT UNSIGNED columns (sequences, revisions, epochs) arrive as canonical decimal
    // strings, never as lossy JS numbers.
    supportBigNumbers: true,
    bigNumberStrings: true,
    timezone: "Z",
    dateStrings: false,
    charset: "utf8mb4",
    // Errors from the server never reach a client (the error middleware hides them);
    // this keeps the SQL text out of mysql2's own error messages as well.
    multipleStatements: false,
    // No stack captured per statement: Orbit never logs driver stacks (describeError), and
    // the capture is a noticeable share of a node's CPU on the hot path.
    trace: false,
  };
}

/** Creates the database named in the URL if it does not exist yet. */
export async function ensureDatabase(target: DatabaseTarget): Promise<void> {
  const u = new URL(target.url);
  u.pathname = "/";
  const conn = await mysql.createConnection({ ...baseOptions(u.toString()) });
  try {
    await conn.query(`CREATE DATABASE IF NOT EXISTS \`${target.database}\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`);
  } finally {
    await conn.end();
  }
}

export type Isolation = "READ COMMITTED" | "REPEATABLE READ";

/** How a pool's connections are set up once per session (withTransaction reads it). */
export interface SessionMode {
  /** Every transaction runs at this level. */
  readonly isolation: Isolation;
  /**
   * autocommit off: the first statement opens the transaction, so withTransaction sends no
   * `START TRANSACTION`. Only for a pool used through withTransaction alone — a bare query
   * would leave a transaction open on the connection.
   */
  readonly implicitTransactions: boolean;
  /**
   * Several statements per round trip (queryAll, commitWith, defer). Only for a pool
   * whose every statement passes its values as parameters (never spliced into the SQL).
   */
  readonly multipleStatements?: boolean;
}

/**
 * Every pool but the engine's (HTTP requests, the sequencer, background work, the CLI):
 * the usual isolation, autocommit on for bare queries, and several statements per round
 * trip so that a transaction's opening and deferred writes travel with its other
 * statements (tx.ts: a completion is 2 round trips, not 6).
 */
const MAIN_SESSION: SessionMode = {
  isolation: "REPEATABLE READ",
  implicitTransactions: false,
  multipleStatements: true,
};

const sessionModes = new WeakMap<Pool, SessionMode>();

export function sessionMode(pool: Pool): SessionMode | undefined {
  return sessionModes.get(pool);
}

/**
 * `mode` sets the isolation level, autocommit and multiple statements once per connection
 * instead of per transaction. The delivery engine's pools have their own (ENGINE_SESSION):
 * a claim's round trips are its latency, and one claim in flight per application makes
 * that latency a subscription's throughput.
 */
/**
 * Callers that may wait for a connection of a pool, per connection: beyond them a caller
 * is refused at once (tx.ts: UNAVAILABLE, 503) instead of joining a queue that a flood of
 * requests could make as long as it likes, each waiting out its whole deadline.
 */
export const WAITERS_PER_CONNECTION = 64;

/**
 * Time limits of a session whose statements serve requests with a deadline: no lock wait
 * or statement lasts longer than one deadline, so a connection is not held for InnoDB's
 * 50 s lock wait long after its request was answered; the error is 503 (tx.ts).
 */
export interface StatementLimits {
  /** innodb_lock_wait_timeout, in whole seconds (InnoDB's unit, at least 1). */
  readonly lockWaitSeconds: number;
  /** MariaDB's max_statement_time (and MySQL's max_execution_time, SELECTs only). */
  readonly statementMs: number;
}

/**
 * The limits of a request deadline: a statement may take as long as the deadline, a lock
 * wait as many whole seconds as it spans. Not shorter: a request answered 503 before its
 * deadline would break the deadline's promise (docs/http.md), and a lock wait that ends
 * sooner is run again (tx.ts) until the deadline anyway.
 */
export function limitsOf(deadlineMs: number): StatementLimits {
  return { statementMs: deadlineMs, lockWaitSeconds: Math.max(1, Math.ceil(deadlineMs / 1000)) };
}

export function createPool(
  url: string,
  connectionLimit: number,
  mode: SessionMode = MAIN_SESSION,
  answerDeadlineMs?: number,
  limits?: StatementLimits,
): Pool {
  const pool = mysql.createPool({
    ...baseOptions(url),
    ...(mode.multipleStatements ? { multipleStatements: true } : {}),
    connectionLimit,
    maxIdle: connectionLimit,
    // A caller waits for a free connection, within its deadline, in a bounded queue.
    waitForConnections: true,
    queueLimit: connectionLimit * WAITERS_PER_CONNECTION,
    enableKeepAlive: true,
    connectTimeout: 5000,
  });
  // Every time the database computes (NOW(3), lease deadlines) is UTC, whatever the
  // server's own zone; this runs before any other statement on a new connection.
  // The promise pool re-emits the event with the callback connection it wraps (mysql2's
  // typings say otherwise): its query() queues the statement and returns no promise.
  pool.on("connection", (conn) => {
    const core = conn as unknown as CoreConnection;
    core.query("SET time_zone = '+00:00'");
    core.query(`SET SESSION TRANSACTION ISOLATION LEVEL ${mode.isolation}`);
    if (mode.implicitTransactions) core.query("SET SESSION autocommit = 0");
    if (limits) {
      // A server or proxy that refuses one of these leaves the connection without that
      // limit, not broken: the errors are ignored (each server knows one of the last two
      // names only).
      core.query(`SET SESSION innodb_lock_wait_timeout = ${limits.lockWaitSeconds}`, () => undefined);
      core.query(`SET SESSION max_statement_time = ${limits.statementMs / 1000}`, () => undefined);
      core.query(`SET SESSION max_execution_time = ${limits.statementMs}`, () => undefined);
    }
    if (answerDeadlineMs !== undefined) watchAnswers(core, answerDeadlineMs);
  });
  sessionModes.set(pool, mode);
  return pool;
}

/** The callback connection under a pool connection: what watchAnswers needs of it. */
interface CoreConnection {
  query(...args: unknown[]): { once(event: "end", listener: () => void): unknown };
  readonly stream: { destroy(error?: Error): void };
}

/**
 * A statement sent on this connection that has no answer after `deadlineMs` breaks the
 * connection with a connection error (PROTOCOL_SEQUENCE_TIMEOUT, the driver's own code for
 * an inactivity timeout: 503 / UNAVAILABLE, tx.ts): every statement waiting on it fails, and
 * the pool drops it and opens a new one for the next caller.
 *
 * Why: a connection that goes silent without closing (a failover, a lost NAT entry, a
 * frozen host) never errors on its own. mysql2 has no default statement timeout (its
 * per-query `timeout` fails the caller but leaves the connection checked out behind the
 * unanswered statement, and `destroy()` settles nothing that waits on it), and TCP
 * keep-alive probes only an idle socket. Its caller and its pool slot would then wait for
 * good: a claim would keep its application's one claim slot (docs/protocol.md §5) and no
 * consumer of that application on the node would be served again; an ACK would never be
 * answered.
 *
 * One timer per statement, set and cleared around each round trip: far cheaper than the
 * round trip it guards (a claim is 2-3). The answer's own end clears it.
 */
function watchAnswers(conn: CoreConnection, deadlineMs: number): void {
  const query = conn.query.bind(conn);
  conn.query = (...args: unknown[]) => {
    const cmd = query(...args);
    const timer = setTimeout(() => conn.stream.destroy(stalledConnectionError(deadlineMs)), deadlineMs);
    // A connection that failed another way ends no command: the timer then finds its
    // stream destroyed already (a no-op), and unref keeps it from holding the process.
    timer.unref();
    cmd.once("end", () => clearTimeout(timer));
    return cmd;
  };
}

function stalledConnectionError(deadlineMs: number): Error {
  return Object.assign(new Error(`no answer from the database within ${deadlineMs} ms`), {
    code: "PROTOCOL_SEQUENCE_TIMEOUT",
    fatal: true,
  });
}

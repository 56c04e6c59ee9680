// Transactions with a bounded retry of the errors that are safe to retry, and a deadline
// checked before COMMIT so that a request that already answered 503 (management timeout)
// never commits behind the client's back.
import type { Pool, PoolConnection } from "mysql2/promise";
import { OrbitError, unavailable } from "../wire/errors.js";
import { databaseErrors, databaseRetries } from "../metrics.js";
import { sessionMode, type Isolation } from "./pool.js";

/** MySQL/MariaDB errors after which the whole transaction may simply be run again. */
const RETRYABLE_SQL_ERRORS: Readonly<Record<number, "deadlock" | "lock_wait_timeout">> = {
  1213: "deadlock", // ER_LOCK_DEADLOCK
  1205: "lock_wait_timeout", // ER_LOCK_WAIT_TIMEOUT
};
const MAX_ATTEMPTS = 5;

/** Errors that mean the database is not reachable right now: the client gets 503. */
const CONNECTION_ERROR_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EPIPE",
  "PROTOCOL_CONNECTION_LOST",
  "ER_CON_COUNT_ERROR",
  "PROTOCOL_SEQUENCE_TIMEOUT",
  "ENOTFOUND",
  "EHOSTUNREACH",
]);

/**
 * Server errors of a writer that is going away or has been demoted (a failover, a
 * restart, a connection killed by an operator or the server's own limits): the database
 * is unavailable for now, and the connection that got one is not used again, since it
 * may stay connected to a server that will refuse every write.
 */
const FAILOVER_ERRNOS: ReadonlySet<number> = new Set([
  1290, // ER_OPTION_PREVENTS_STATEMENT: --read-only (a demoted writer)
  1836, // ER_READ_ONLY_MODE
  1792, // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
  1053, // ER_SERVER_SHUTDOWN
  1927, // ER_CONNECTION_KILLED (MariaDB's number; unused by MySQL)
  4031, // ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8's number: the server closed an idle
  //       connection; MariaDB's 4031 is a trigger error that Orbit's statements never raise)
]);

/**
 * A statement stopped by the session's time limit (pool.ts, the request deadline): the
 * database is too slow right now, as for a lock wait that outlives the deadline.
 */
const STATEMENT_TIMEOUT_ERRNOS: ReadonlySet<number> = new Set([
  1969, // ER_STATEMENT_TIMEOUT (MariaDB max_statement_time)
  3024, // ER_QUERY_TIMEOUT (MySQL max_execution_time)
]);

/** mysql2's refusal when a pool's wait queue is full (it carries no code). */
const QUEUE_FULL_MESSAGE = "Queue limit reached.";

export function isFailoverError(e: unknown): boolean {
  const errno = (e as { errno?: unknown })?.errno;
  return typeof errno === "number" && FAILOVER_ERRNOS.has(errno);
}

export function isRetryable(e: unknown): boolean {
  const errno = (e as { errno?: unknown })?.errno;
  return typeof errno === "number" && errno in RETRYABLE_SQL_ERRORS;
}

/**
 * The database is not there yet: not created (ER_BAD_DB_ERROR) or not migrated
 * (ER_NO_SUCH_TABLE) — a node started with --no-migrate before the deploy's migrate step.
 * Not ready is a 503 like a database that does not answer, on every route and on the
 * event connection, not a 500 INTERNAL, which a load balancer reads as a broken node.
 */
const NOT_THERE_YET_CODES = new Set(["ER_BAD_DB_ERROR", "ER_NO_SUCH_TABLE"]);

export function isUnavailableError(e: unknown): boolean {
  const { code, errno, message } = (e ?? {}) as { code?: unknown; errno?: unknown; message?: unknown };
  if (typeof code === "string" && (CONNECTION_ERROR_CODES.has(code) || NOT_THERE_YET_CODES.has(code))) return true;
  if (typeof errno === "number" && (FAILOVER_ERRNOS.has(errno) || STATEMENT_TIMEOUT_ERRNOS.has(errno))) return true;
  return code === undefined && message === QUEUE_FULL_MESSAGE;
}

/** Maps driver failures that are the database's fault to UNAVAILABLE; others pass. */
export function translateDbError(e: unknown): unknown {
  if (e instanceof OrbitError) return e;
  if (isUnavailableError(e)) {
    databaseErrors.inc({ kind: "unavailable" });
    return unavailable();
  }
  // Still deadlocking after the retries: a transient conflict, not a bug — the client may
  // retry (503 with Retry-After), and the idempotency key makes a retried write safe.
  if (isRetryable(e)) {
    databaseErrors.inc({ kind: "conflict" });
    return unavailable();
  }
  return e;
}

import type { Tx } from "./types.js";
export type { Tx };

/** A statement and its parameters, to be sent with others in one round trip. */
export interface Statement {
  readonly sql: string;
  readonly params: readonly unknown[];
}

/** Transactions that committed themselves (commitWith): withTransaction must not commit or retry them. */
const selfCommitted = new WeakSet<object>();

/**
 * A transaction on a pool with several statements per round trip (SessionMode) holds back
 * what needs no answer — its opening (isolation, START TRANSACTION) and deferred writes —
 * and sends it with its next statement or its COMMIT. A completion is 2 round trips, not
 * 6 (its writes go with COMMIT: commitAll), and fewer round trips cost both MariaDB and
 * the client markedly less CPU (bench/README.md).
 */
interface Pipeline {
  readonly conn: PoolConnection;
  /** Not sent yet, in order. */
  readonly queue: Statement[];
  /** How many of the first queued statements open the transaction. */
  readonly opening: number;
  /** Whether anything reached the server (if not, there is nothing to commit or roll back). */
  sent: boolean;
}

const pipelines = new WeakMap<Tx, Pipeline>();

/** Sends the held-back statements and these in one round trip; returns these ones' results. */
async function send(tx: Tx, statements: readonly Statement[]): Promise<unknown[]> {
  const p = pipelines.get(tx);
  const all = p ? [...p.queue.splice(0), ...statements] : statements;
  if (p) p.sent = true;
  const [results] = await (p?.conn ?? tx).query(
    all.map((st) => st.sql).join(";\n"),
    all.flatMap((st) => [...st.params]),
  );
  return (all.length === 1 ? [results] : (results as unknown[])).slice(all.length - statements.length);
}

/** The connection as the transaction's code sees it: every tx.query takes the held-back statements along. */
function pipelined(conn: PoolConnection, opening: readonly Statement[]): Tx {
  const tx = Object.create(conn) as Tx;
  const p: Pipeline = { conn, queue: [...opening], opening: opening.length, sent: false };
  pipelines.set(tx, p);
  tx.query = (async (sql: string, params?: unknown[]) => {
    if (p.queue.length === 0) {
      p.sent = true;
      return conn.query(sql, params);
    }
    return [(await send(tx, [{ sql, params: params ?? [] }]))[0], undefined];
  }) as unknown as Tx["query"];
  return tx;
}

/**
 * Sends several statements in one round trip and returns each one's result, in order.
 * Only on a connection whose pool allows multiple statements (SessionMode); a claim's
 * round trips are its latency (bench/README.md).
 */
export function queryAll(tx: Tx, statements: readonly Statement[]): Promise<unknown[]> {
  return send(tx, statements);
}

/**
 * A write whose result nobody reads: in a pipelined transaction it goes with the next
 * round trip (a statement or COMMIT), elsewhere at once. Its failure, if any, surfaces
 * there and fails the transaction as usual — so never defer a statement whose error the
 * caller would handle itself.
 */
export async function defer(tx: Tx, statement: Statement): Promise<void> {
  const p = pipelines.get(tx);
  if (p) p.queue.push(statement);
  else await send(tx, [statement]);
}

/**
 * Runs the statement(s) and COMMIT in one round trip; returns the first one's result. If the
 * statement fails, COMMIT does not run (the server stops at the first error) and the
 * transaction is rolled back as usual. After this, nothing in the transaction may throw
 * for a retry: what it wrote is committed.
 */
export async function commitWith(tx: Tx, statement: Statement | readonly Statement[]): Promise<unknown> {
  const statements = Array.isArray(statement) ? (statement as readonly Statement[]) : [statement as Statement];
  return (await commitAll(tx, statements))[0];
}

/** commitWith, returning every statement's result, in order (COMMIT's left out). */
export async function commitAll(tx: Tx, statements: readonly Statement[]): Promise<unknown[]> {
  const results = await queryAll(tx, [...statements, COMMIT]);
  selfCommitted.add(tx);
  return results.slice(0, statements.length);
}

const COMMIT: Statement = { sql: "COMMIT", params: [] };

/** COMMIT, with whatever is held back; nothing at all when the transaction never began. */
async function commit(tx: Tx): Promise<void> {
  const p = pipelines.get(tx);
  if (!p) return tx.commit();
  if (p.sent || p.queue.length > p.opening) await send(tx, [COMMIT]);
}

export async function withTransaction<T>(
  pool: Pool,
  fn: (tx: Tx) => Promise<T>,
  signal?: AbortSignal,
  isolation?: Isolation,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    let conn: PoolConnection | undefined;
    let tx: Tx | undefined;
    try {
      conn = await pool.getConnection();
      // The deadline may have passed while this waited for a connection: its request was
      // answered 503 already, so none of its work is started.
      if (signal?.aborted) {
        conn.release();
        conn = undefined;
        throw unavailable();
      }
      const mode = sessionMode(pool);
      const opening: Statement[] = [];
      // Applies to the next transaction only; the pool's own level stays.
      if (isolation && mode?.isolation !== isolation)
        opening.push({ sql: `SET TRANSACTION ISOLATION LEVEL ${isolation}`, params: [] });
      if (!mode?.implicitTransactions) opening.push({ sql: "START TRANSACTION", params: [] });
      if (mode?.multipleStatements) tx = pipelined(conn, opening);
      else {
        tx = conn;
        for (const st of opening) await conn.query(st.sql);
      }
      const out = await fn(tx);
      if (selfCommitted.delete(tx)) {
        conn.release();
        return out;
      }
      if (signal?.aborted) throw unavailable();
      await commit(tx);
      conn.release();
      return out;
    } catch (e) {
      if (tx && selfCommitted.delete(tx)) {
        // Committed already: nothing to roll back, and running it again would repeat it.
        if (isFailoverError(e)) conn!.destroy();
        else conn!.release();
        throw translateDbError(e);
      }
      if (conn && isFailoverError(e)) {
        // The server rolls back what it refused or what it dropped; this connection is not
        // used again (FAILOVER_ERRNOS).
        conn.destroy();
      } else if (conn) {
        const p = tx && pipelines.get(tx);
        // A failed ROLLBACK means the connection is broken: drop it rather than reuse it.
        if (p && !p.sent) conn.release();
        else
          await conn.rollback().then(
            () => conn!.release(),
            () => conn!.destroy(),
          );
      }
      if (isRetryable(e) && attempt < MAX_ATTEMPTS && !signal?.aborted) {
        databaseRetries.inc({ kind: RETRYABLE_SQL_ERRORS[(e as { errno: number }).errno]! });
        await new Promise((r) => setTimeout(r, 2 ** attempt + Math.random() * 10));
        continue;
      }
      throw translateDbError(e);
    }
  }
}

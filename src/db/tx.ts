// Transactions with a bounded retry of the errors that are safe to retry, and a deadline
// checked before COMMIT so that a request that already answered 503 (management timeout)
// never commits behind the client's back.
import type { Pool, PoolConnection } from "mysql2/promise";
import { OrbitError, unavailable } from "../wire/errors.js";
import { databaseErrors } from "../metrics.js";
import { sessionMode, type Isolation } from "./pool.js";

/** MySQL/MariaDB errors after which the whole transaction may simply be run again. */
const RETRYABLE_SQL_ERRORS: Readonly<Record<number, string>> = {
  1213: "ER_LOCK_DEADLOCK",
  1205: "ER_LOCK_WAIT_TIMEOUT",
};
const MAX_ATTEMPTS = 5;

/** Errors that mean the database is not reachable right now: the client gets 503. */
const CONNECTION_ERROR_CODES = new Set([
  "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "PROTOCOL_CONNECTION_LOST",
  "ER_CON_COUNT_ERROR", "PROTOCOL_SEQUENCE_TIMEOUT", "ENOTFOUND", "EHOSTUNREACH",
]);

export function isRetryable(e: unknown): boolean {
  const errno = (e as { errno?: unknown })?.errno;
  return typeof errno === "number" && errno in RETRYABLE_SQL_ERRORS;
}

export function isConnectionError(e: unknown): boolean {
  const code = (e as { code?: unknown })?.code;
  return typeof code === "string" && CONNECTION_ERROR_CODES.has(code);
}

/** Maps driver failures that are the database's fault to UNAVAILABLE; others pass. */
export function translateDbError(e: unknown): unknown {
  if (e instanceof OrbitError) return e;
  if (isConnectionError(e)) {
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
 * Sends several statements in one round trip and returns each one's result, in order.
 * Only on a connection whose pool allows multiple statements (SessionMode); a claim's
 * round trips are its latency (bench/README.md).
 */
export async function queryAll(tx: Tx, statements: readonly Statement[]): Promise<unknown[]> {
  const [results] = await tx.query(statements.map((st) => st.sql).join(";\n"), statements.flatMap((st) => [...st.params]));
  return statements.length === 1 ? [results] : (results as unknown[]);
}

/**
 * Runs the statement(s) and COMMIT in one round trip; returns the first one's result. If the
 * statement fails, COMMIT does not run (the server stops at the first error) and the
 * transaction is rolled back as usual. After this, nothing in the transaction may throw
 * for a retry: what it wrote is committed.
 */
export async function commitWith(tx: Tx, statement: Statement | readonly Statement[]): Promise<unknown> {
  const statements = Array.isArray(statement) ? (statement as readonly Statement[]) : [statement as Statement];
  const results = await queryAll(tx, [...statements, { sql: "COMMIT", params: [] }]);
  selfCommitted.add(tx);
  return results[0];
}

export async function withTransaction<T>(
  pool: Pool,
  fn: (tx: Tx) => Promise<T>,
  signal?: AbortSignal,
  isolation?: Isolation,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    let conn: PoolConnection | undefined;
    try {
      conn = await pool.getConnection();
      // Applies to the next transaction only; the default stays REPEATABLE READ.
      const mode = sessionMode(pool);
      if (isolation && mode?.isolation !== isolation) await conn.query(`SET TRANSACTION ISOLATION LEVEL ${isolation}`);
      if (!mode?.implicitTransactions) await conn.beginTransaction();
      const out = await fn(conn);
      if (selfCommitted.delete(conn)) {
        conn.release();
        return out;
      }
      if (signal?.aborted) throw unavailable();
      await conn.commit();
      conn.release();
      return out;
    } catch (e) {
      if (conn && selfCommitted.delete(conn)) {
        // Committed already: nothing to roll back, and running it again would repeat it.
        conn.release();
        throw translateDbError(e);
      }
      if (conn) {
        // A failed ROLLBACK means the connection is broken: drop it rather than reuse it.
        await conn.rollback().then(() => conn!.release(), () => conn!.destroy());
      }
      if (isRetryable(e) && attempt < MAX_ATTEMPTS && !signal?.aborted) {
        await new Promise((r) => setTimeout(r, 2 ** attempt + Math.random() * 10));
        continue;
      }
      throw translateDbError(e);
    }
  }
}

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

/**
 * Thrown by a transaction that found a row changed between its read and its guarded
 * write (a rare race it does not lock against): the whole transaction runs again.
 */
export class RetryTransaction extends Error {}

export function isRetryable(e: unknown): boolean {
  if (e instanceof RetryTransaction) return true;
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
      if (signal?.aborted) throw unavailable();
      await conn.commit();
      conn.release();
      return out;
    } catch (e) {
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

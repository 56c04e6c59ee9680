// Ids on the wire and in the database: 32 lowercase hex characters. Ids are names, not
// secrets; lease secrets and tokens take their own randomBytes. Their random part comes
// from a pooled buffer (random-hex.ts), which the SDK uses too.
import { randomHex } from "./random-hex.js";

/**
 * `value` when it is a well-formed id, else undefined. A target's scope is checked before
 * its body (404 before 400, docs/protocol.md §1): a rejected body's target counts only
 * when it is well-formed (an HTTP body's queue_id, http/handlers/queue-scope.ts; a
 * hello's subscription_id, ws/frames.ts).
 */
export function wellFormedId(value: unknown): string | undefined {
  return typeof value === "string" && /^[0-9a-f]{32}$/.test(value) ? value : undefined;
}

/** 16 random bytes: request and message ids, which nothing stores as a key. */
export function newHexId(): string {
  return randomHex(16);
}

/**
 * A request's id: the caller's X-Request-ID when it is exactly 32 lowercase hex (a caller,
 * or its load balancer, may pass its own for tracing), else a new one. Every HTTP answer
 * and every answer to an upgrade uses it (openapi.yaml "Envelope and headers").
 */
export function requestIdFrom(offered: string | undefined): string {
  return wellFormedId(offered) ?? newHexId();
}

/**
 * A row's id (entities, sessions): the creating clock's milliseconds in the first 12 hex
 * characters, then 80 random bits. They are InnoDB primary keys, and every secondary index
 * ends with the primary key: random keys put each insert on a random page of every index
 * of the table, time-ordered keys put them at its end, which keeps inserts cheap once a
 * table outgrows the buffer pool (deliveries and audit records are kept, so tables grow).
 * 80 bits stay unguessable; the time an id shows is its row's created_at, which the API
 * shows anyway.
 */
export function newRowId(now: number = Date.now()): string {
  return rowIdPrefix(now) + randomHex(10);
}

/** The time part of a row id, for SQL that makes ids itself (materialising). */
export function rowIdPrefix(now: number): string {
  return Math.floor(now).toString(16).padStart(12, "0");
}

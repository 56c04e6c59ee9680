// Opaque paging cursors (docs/protocol.md §3-4): base64url of a small JSON object holding the
// position (created_at, id) of the last row of a page and what the cursor is bound to:
// the list (queue or subscription), credential, namespace and state filter. Any other
// use, or a cursor that does not decode, is 400 INVALID_ARGUMENT. Forging one gains
// nothing: every list query filters by the caller's own credential and scope anyway.
import { invalidArgument } from "../wire/errors.js";

export interface Binding {
  /** "subscriptions:<queue_id>" or "deliveries:<subscription_id>". */
  readonly list: string;
  readonly credentialId: string;
  readonly namespaceId: string;
  /** The state filter, "" for none. */
  readonly filter: string;
}

export interface Position {
  readonly createdAt: Date;
  readonly id: string;
}

interface CursorBody {
  l: string;
  c: string;
  n: string;
  f: string;
  t: number;
  i: string;
}

export const DEFAULT_PAGE_LIMIT = 20;

/**
 * The latest time a created_at can hold: DATETIME(3) ends at 9999-12-31 23:59:59.999. A
 * later one (a Date holds up to 8.64e15 ms) would reach the database as a year past 9999,
 * no datetime: the comparison would match nothing and the page come back empty (200).
 */
const MAX_POSITION_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

export function encodeCursor(b: Binding, p: Position): string {
  const body: CursorBody = {
    l: b.list,
    c: b.credentialId,
    n: b.namespaceId,
    f: b.filter,
    t: p.createdAt.getTime(),
    i: p.id,
  };
  return Buffer.from(JSON.stringify(body)).toString("base64url");
}

export function decodeCursor(cursor: string, b: Binding): Position {
  let body: CursorBody;
  try {
    body = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8")) as CursorBody;
  } catch {
    throw invalidArgument("cursor is not a cursor of this list");
  }
  const ok =
    body !== null &&
    typeof body === "object" &&
    body.l === b.list &&
    body.c === b.credentialId &&
    body.n === b.namespaceId &&
    body.f === b.filter &&
    // A time a created_at can hold: past it (and past 8.64e15 ms, Invalid Date, which the
    // driver sends as NULL) the page would come back empty (200) instead of 400.
    Number.isSafeInteger(body.t) &&
    body.t >= 0 &&
    body.t <= MAX_POSITION_MS &&
    typeof body.i === "string" &&
    /^[0-9a-f]{32}$/.test(body.i);
  if (!ok) throw invalidArgument("cursor is not a cursor of this list, credential and filter");
  return { createdAt: new Date(body.t), id: body.i };
}

/** Splits limit+1 fetched rows into a page and the next cursor. */
export function page<R extends { created_at: Date; id: string }, W>(
  rows: R[],
  limit: number,
  b: Binding,
  toWire: (r: R) => W,
): { items: W[]; next_cursor?: string } {
  const items = rows.slice(0, limit);
  const last = items.at(-1);
  return rows.length > limit && last
    ? { items: items.map(toWire), next_cursor: encodeCursor(b, { createdAt: last.created_at, id: last.id }) }
    : { items: items.map(toWire) };
}

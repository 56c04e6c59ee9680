// How every idempotent write answers (docs/protocol.md §1-2): 201 for a new create, 200 for
// everything else; the original receipt with deduplicated=true for a replay.
import type { Tx } from "../../db/types.js";
import { withTransaction } from "../../db/tx.js";
import type { Receipt } from "../../domain/idempotency.js";
import type { HandlerContext } from "../router.js";

/** Runs a write in one transaction under the request's deadline. */
export const inTransaction = <T>(ctx: HandlerContext, write: (tx: Tx) => Promise<T>): Promise<T> =>
  withTransaction(ctx.pool, write, ctx.signal);

export const answered = <D extends object>(r: Receipt<D>) => ({
  status: 200 as const,
  data: { ...r.data, deduplicated: r.deduplicated },
});

export const created = <D extends object>(r: Receipt<D>) =>
  r.deduplicated
    ? { status: 200 as const, data: { ...r.data, deduplicated: true } }
    : { status: 201 as const, data: { ...r.data, deduplicated: false } };

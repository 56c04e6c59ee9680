// Subscription management (docs/protocol.md §2-3): create, read, list, configure. A subscription
// belongs to the credential that created it and to its queue: every operation checks
// both, and anything else is NOT_FOUND (never revealing that it exists).
import type { components } from "../../generated/http/openapi-types.js";
import type { Pool, Tx } from "../db/types.js";
import {
  insertSubscription,
  lockNamespaceAndCount,
  nameTaken,
  selectSubscription,
  selectSubscriptionPage,
  updateEnabled,
  type SubscriptionRow,
} from "../db/queries/subscriptions.js";
import { insertAudit } from "../db/queries/audit.js";
import { MAX_SUBSCRIPTIONS_PER_NAMESPACE } from "../config/limits.js";
import { OrbitError, invalidArgument, notFound, stateConflict } from "../wire/errors.js";
import { formatTimestamp } from "../wire/time.js";
import { UINT64_MAX } from "../wire/uint64.js";
import { idempotent, type Receipt } from "./idempotency.js";
import { newId, type Caller } from "./identity.js";
import { DEFAULT_PAGE_LIMIT, decodeCursor, page, type Binding } from "./paging.js";
import { RESULT_EVENT_TYPES, isResultEventType, readStream } from "./result-log.js";
import { nowMs } from "../clock.js";

export const DEFAULT_MAX_PENDING = 100;
export const DEFAULT_MAX_ATTEMPTS = 20;

/** The wire Subscription of docs/protocol.md §3, as the contract defines it (openapi.yaml, generated). */
export type SubscriptionWire = components["schemas"]["Subscription"];

export function toWireSubscription(s: SubscriptionRow): SubscriptionWire {
  return {
    id: s.id,
    queue_id: s.queue_id,
    credential_id: s.credential_id,
    name: s.name,
    revision: s.revision,
    enabled: Boolean(s.enabled),
    types: s.types.split(",").filter(isResultEventType),
    cursor_sequence: s.cursor_sequence,
    pending_count: s.pending_count,
    max_pending: s.max_pending,
    max_attempts: s.max_attempts,
    created_at: formatTimestamp(s.created_at),
    updated_at: formatTimestamp(s.updated_at),
  };
}

/** The caller's own subscription in its scope, or NOT_FOUND. */
export function owned(caller: Caller, s: SubscriptionRow | undefined): SubscriptionRow {
  const mine =
    s &&
    s.namespace_id === caller.namespaceId &&
    s.credential_id === caller.credentialId &&
    caller.queues.has(s.queue_id);
  if (!mine) throw notFound();
  return s;
}

export async function getSubscription(
  db: Pool | Tx,
  caller: Caller,
  id: string,
  lock = false,
): Promise<SubscriptionRow> {
  return owned(caller, await selectSubscription(db, id, lock));
}

export interface CreateInput {
  readonly name: string;
  readonly queueId: string;
  readonly types?: readonly string[];
  readonly fromSequence?: string | null;
  readonly maxPending?: number;
  readonly maxAttempts?: number;
  readonly key: string;
  readonly canonicalBody: string;
}

/** `types` omitted or [] means all four; otherwise sorted (protocol §2: a fixed order). */
export function normaliseTypes(types: readonly string[] | undefined): string[] {
  return [...(types === undefined || types.length === 0 ? RESULT_EVENT_TYPES : types)].sort();
}

/**
 * A create as the node reads it, for the idempotency comparison: defaults applied and
 * `types` normalised, so that a replay written differently but meaning the same (`0.0`
 * for `0`, a default spelled out or left out, `types` in another order) is a replay, not
 * a conflict. An omitted `from_sequence` stays apart from any value: it means the head at
 * the time of the first request.
 */
export function createMeaning(c: CreateInput): string {
  return JSON.stringify({
    name: c.name,
    queue_id: c.queueId,
    types: normaliseTypes(c.types),
    from_sequence: c.fromSequence ?? null,
    max_pending: c.maxPending || DEFAULT_MAX_PENDING,
    max_attempts: c.maxAttempts || DEFAULT_MAX_ATTEMPTS,
  });
}

/**
 * The starting cursor (docs/protocol.md §2): events with a greater sequence are delivered.
 * Omitted/null: the committed head now. "0": the start of the retained log. Above the
 * head: 400. Before the retention boundary: 410 EVENT_HISTORY_EXPIRED.
 */
export function startingCursor(from: string | null | undefined, head: string, boundary: string): string {
  if (from === undefined || from === null) return head;
  if (from === "0") return boundary;
  if (BigInt(from) > BigInt(head))
    throw invalidArgument(`from_sequence ${from} is above the committed stream head ${head}`);
  if (BigInt(from) < BigInt(boundary))
    throw new OrbitError("EVENT_HISTORY_EXPIRED", `history up to ${boundary} was purged`);
  return from;
}

export async function createSubscription(
  tx: Tx,
  caller: Caller,
  c: CreateInput,
): Promise<Receipt<{ subscription: SubscriptionWire }>> {
  if (!caller.queues.has(c.queueId)) throw notFound();
  const ref = { credentialId: caller.credentialId, operation: "subscriptions.create", key: c.key };
  return idempotent(tx, { ref, content: c.canonicalBody, meaning: createMeaning(c) }, async () => {
    const count = await lockNamespaceAndCount(tx, caller.namespaceId);
    // Read under the namespace lock: the head we start from is the committed head now.
    // from_sequence first: above the head it is the body's 400, which comes before the
    // state's 409s (the order of checks).
    const { head, retentionBoundary } = await readStream(tx, caller.namespaceId);
    const cursor = startingCursor(c.fromSequence, head, retentionBoundary);
    if (count >= MAX_SUBSCRIPTIONS_PER_NAMESPACE) throw new OrbitError("SUBSCRIPTION_LIMIT");
    if (await nameTaken(tx, caller.namespaceId, c.name))
      throw stateConflict(`a subscription named "${c.name}" exists in the namespace`);
    const id = newId();
    const now = nowMs();
    await insertSubscription(tx, {
      id,
      namespace_id: caller.namespaceId,
      application_id: caller.applicationId,
      credential_id: caller.credentialId,
      queue_id: c.queueId,
      name: c.name,
      types: normaliseTypes(c.types).join(","),
      cursor_sequence: cursor,
      max_pending: c.maxPending || DEFAULT_MAX_PENDING,
      max_attempts: c.maxAttempts || DEFAULT_MAX_ATTEMPTS,
      created_at: now,
    });
    return { status: 201, data: { subscription: toWireSubscription((await selectSubscription(tx, id))!) } };
  });
}

export async function listSubscriptions(
  pool: Pool,
  caller: Caller,
  q: { queueId: string; limit?: number; cursor?: string },
): Promise<{ items: SubscriptionWire[]; next_cursor?: string }> {
  if (!caller.queues.has(q.queueId)) throw notFound();
  const binding: Binding = {
    list: `subscriptions:${q.queueId}`,
    credentialId: caller.credentialId,
    namespaceId: caller.namespaceId,
    filter: "",
  };
  const after = q.cursor === undefined ? undefined : decodeCursor(q.cursor, binding);
  const limit = q.limit ?? DEFAULT_PAGE_LIMIT;
  const rows = await selectSubscriptionPage(pool, caller.credentialId, q.queueId, after, limit + 1);
  return page(rows, limit, binding, toWireSubscription);
}

export interface ConfigureInput {
  readonly id: string;
  readonly expectedRevision: string;
  readonly enabled: boolean;
  readonly reason: string;
  readonly key: string;
  readonly canonicalBody: string;
}

/**
 * Changes only `enabled`. Every accepted command bumps the revision, also with the same
 * boolean, and is audited; a replay returns the original receipt.
 */
export async function configureSubscription(
  tx: Tx,
  caller: Caller,
  c: ConfigureInput,
): Promise<Receipt<{ subscription: SubscriptionWire }>> {
  const ref = { credentialId: caller.credentialId, operation: "subscriptions.configure", key: c.key };
  return idempotent(tx, { ref, content: `${c.id}\n${c.canonicalBody}` }, async () => {
    const s = await getSubscription(tx, caller, c.id, true);
    if (s.revision !== c.expectedRevision)
      throw stateConflict(`expected_revision is ${c.expectedRevision}, the subscription is at ${s.revision}`);
    // The revision is a uint64 on the wire and BIGINT UNSIGNED in the table: at its maximum
    // the bump would overflow (MariaDB error 1690), so the command is refused, not a 500.
    if (BigInt(s.revision) === UINT64_MAX)
      throw stateConflict(`the subscription's revision is at its maximum, ${s.revision}; it cannot change again`);
    const now = nowMs();
    if (!(await updateEnabled(tx, s.id, s.revision, c.enabled, now)))
      throw new Error("subscription changed under its lock");
    const after = (await selectSubscription(tx, s.id))!;
    await insertAudit(tx, {
      id: newId(),
      namespaceId: caller.namespaceId,
      credentialId: caller.credentialId,
      subscriptionId: s.id,
      action: "subscription.configure",
      details: { enabled: c.enabled, enabled_before: Boolean(s.enabled) },
      reason: c.reason,
      revisionBefore: s.revision,
      revisionAfter: after.revision,
      at: now,
    });
    return { status: 200, data: { subscription: toWireSubscription(after) } };
  });
}

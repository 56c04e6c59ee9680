// The batch completion (docs/tasks.md §6): several completeAttempt calls in one request,
// each answered in its place as the single call would answer it, committed together
// (attempt-batches.ts runTogether: one transaction, with any other calls waiting).
import type { components } from "../../../generated/http/openapi-types.js";
import type { Handler, HandlerRequest } from "../../../generated/http/routes.js";
import { MAX_BATCH } from "../../domain/attempt-batches.js";
import { toWireTask } from "../../domain/task-state.js";
import { checkResultSize } from "../../domain/tasks.js";
import type { AttemptRequest } from "../../domain/worker.js";
import { canonicalJson } from "../../wire/canonical.js";
import { OrbitError, invalidArgument, unauthenticated } from "../../wire/errors.js";
import { wellFormedId } from "../../wire/ids.js";
import { arrayElementTexts } from "../../wire/json-elements.js";
import { parseStrictJson } from "../../wire/json.js";
import type { HandlerContext } from "../router.js";
import { check } from "../validation.js";

type ItemResult = components["schemas"]["CompleteAttemptsItemResult"];
type Refused = components["schemas"]["CompleteAttemptsItemRefused"];
type CompleteAttemptRequest = components["schemas"]["CompleteAttemptRequest"];

/** The statuses an item may answer (openapi.yaml CompleteAttemptsItemRefused). */
const ITEM_STATUSES: ReadonlySet<number> = new Set([400, 404, 409]);

interface Item {
  readonly attemptId: string;
  /** The item's call, or its 400: thrown only after its attempt's scope check (404 first). */
  readonly request: () => AttemptRequest;
}

export const completeAttempts: Handler<"completeAttempts", HandlerContext> = async (req, ctx) => {
  const caller = ctx.caller();
  const items = await readItems(req);
  const outcomes = await ctx.services.attempts.runTogether(
    items.map((item) => ({ caller, attemptId: item.attemptId, request: item.request })),
    ctx.signal,
  );
  // The credential was revoked (checked in the transaction, as for completeAttempt): every
  // item is 401, so the request is.
  if (outcomes.some((o) => o.error?.code === "UNAUTHENTICATED")) throw unauthenticated();
  const answers = outcomes.map((o, i): ItemResult => {
    const attempt_id = items[i]!.attemptId;
    if (!o.error) return { attempt_id, status: 200, task: toWireTask(o.task) };
    if (!ITEM_STATUSES.has(o.error.status)) throw o.error;
    const { code, message } = o.error;
    return { attempt_id, status: o.error.status as Refused["status"], error: { code, message } };
  });
  return { status: 200, data: { items: answers } };
};

/**
 * The request's items, or its 400 when it cannot be read as a list of attempts (openapi.yaml
 * completeAttempts): an item that names its attempt but breaks CompleteAttemptsItem
 * otherwise keeps its 400 for its own place. Each item is taken from its exact text, so
 * that its result is kept as sent and its canonical body (without attempt_id) is the one
 * completeAttempt stores for the identical-repeat rule, whichever call ended the attempt.
 */
async function readItems(req: HandlerRequest<"completeAttempts">): Promise<Item[]> {
  let refused: OrbitError | undefined;
  try {
    await req.body();
  } catch (e) {
    // Not JSON, not an object, or without items: nothing to read item by item.
    if (!(e instanceof OrbitError) || e.code !== "INVALID_ARGUMENT" || req.rawField("items") === undefined) throw e;
    refused = e;
  }
  if (refused) {
    const fields = Object.keys(parseStrictJson(req.canonicalBody()).value as object);
    const unknown = fields.find((f) => f !== "items");
    if (unknown !== undefined) throw invalidArgument(`body: unknown field ${JSON.stringify(unknown)}`);
  }
  const texts = arrayElementTexts(req.rawField("items")!);
  if (!texts || texts.length < 1 || texts.length > MAX_BATCH)
    throw invalidArgument(`body field items: must be an array of 1 to ${MAX_BATCH} items`);
  const named = new Map<string, number>();
  const items = texts.map((text, i): Item & { readonly refused: boolean } => {
    const { value, raw } = parseStrictJson(text);
    if (typeof value !== "object" || value === null || Array.isArray(value))
      throw invalidArgument(`body field items.${i}: must be an object`);
    const attemptId = wellFormedId((value as { attempt_id?: unknown }).attempt_id);
    if (attemptId === undefined)
      throw invalidArgument(`body field items.${i}.attempt_id: must be an attempt id (32 lowercase hex)`);
    const earlier = named.get(attemptId);
    if (earlier !== undefined)
      throw invalidArgument(`body field items.${i}.attempt_id: names the attempt of items.${earlier} again`);
    named.set(attemptId, i);
    try {
      const request = itemRequest(value as Record<string, unknown>, raw, i);
      return { attemptId, request: () => request, refused: false };
    } catch (e) {
      if (!(e instanceof OrbitError)) throw e;
      return {
        attemptId,
        request: () => {
          throw e;
        },
        refused: true,
      };
    }
  });
  // The schema refused the body for a reason the checks above do not name: never taken.
  if (refused && !items.some((item) => item.refused)) throw refused;
  return items;
}

/** One item as completeAttempt reads its body: the same validator, size limit and canonical text. */
function itemRequest(value: Record<string, unknown>, raw: ReadonlyMap<string, string>, i: number): AttemptRequest {
  const { attempt_id: _, ...body } = value;
  const valid = check<CompleteAttemptRequest>("body_completeAttempt", body, `items.${i}`);
  const resultText = raw.get("result");
  checkResultSize(resultText);
  const fields = [...raw].filter(([name]) => name !== "attempt_id");
  return {
    call: { kind: "complete", outcome: valid.outcome, ...(resultText !== undefined ? { resultText } : {}) },
    canonicalBody: canonicalJson(`{${fields.map(([name, text]) => `${JSON.stringify(name)}:${text}`).join(",")}}`),
  };
}

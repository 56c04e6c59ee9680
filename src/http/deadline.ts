// The management deadline of an operation (docs/protocol.md §1: 503 past it).
import type { RouteSpec } from "../../generated/http/routes.js";
import { MAX_CLAIM_WAIT_MS } from "../config/limits.js";
import { unavailable } from "../wire/errors.js";

/** The worker's claims, single and batch: each may wait up to its wait_ms for work. */
const LONG_POLLS: ReadonlySet<string> = new Set(["claimTask", "claimTasks"]);

/**
 * The management deadline. A worker claim may long-poll up to MAX_CLAIM_WAIT_MS on
 * purpose, so its deadline is the longest wait plus the same deadline; the claim bounds
 * its own wait by the wait_ms it was given (openapi.yaml: the same deadline whatever its
 * wait_ms — the body is not read yet when the deadline starts).
 */
export function deadlineMs(route: RouteSpec, requestTimeoutMs: number): number {
  return LONG_POLLS.has(route.operationId) ? requestTimeoutMs + MAX_CLAIM_WAIT_MS : requestTimeoutMs;
}

/**
 * `work`'s answer, or 503 UNAVAILABLE once `ms` pass, when `controller` is aborted too so
 * that the work's transaction rolls back instead of committing. The work goes on after a
 * timeout until it rolls back; its outcome is no longer anyone's to report.
 */
export async function withinDeadline<T>(work: Promise<T>, ms: number, controller: AbortController): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      controller.abort();
      reject(unavailable());
    }, ms);
  });
  try {
    return await Promise.race([work, deadline]);
  } finally {
    clearTimeout(timer);
    work.catch(() => undefined);
  }
}

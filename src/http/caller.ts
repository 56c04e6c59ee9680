// Who is calling: the operation's authentication (401) and action (403), the first two
// checks of docs/protocol.md §1, from a fresh lookup of the credential or, for the task
// path's requests (REVOCATION_IN_TRANSACTION), from what the node remembers of it.
import type { Context } from "koa";
import type { RouteSpec } from "../../generated/http/routes.js";
import { translateDbError } from "../db/tx.js";
import type { CredentialLookups } from "../domain/credential-lookups.js";
import { authenticate, authenticateRemembered, isAction, requireAction, type Caller } from "../domain/identity.js";
import { OrbitError, unauthenticated } from "../wire/errors.js";

/**
 * The operations that authenticate from what the node remembers of the credential, with
 * no lookup of their own (credential-lookups.ts), because their transaction checks the
 * credential is not revoked: a producer's submit (tasks.ts submitTask), a worker's claims
 * (worker.ts claimQueued) and its calls on its attempts (worker.ts endAttemptCalls). They
 * are most of the requests of the task path.
 */
export const REVOCATION_IN_TRANSACTION: ReadonlySet<string> = new Set([
  "submitTask",
  "claimTask",
  "claimTasks",
  "completeAttempt",
  "completeAttempts",
  "requeueAttempt",
]);

/** `remembered`: authenticate from the node's memory (REVOCATION_IN_TRANSACTION). */
export async function resolveCaller(
  ctx: Context,
  route: RouteSpec,
  credentials: CredentialLookups,
  remembered: boolean,
): Promise<Caller | undefined> {
  if (route.permission === "none") return undefined;
  let caller: Caller;
  try {
    // A repeated Authorization header is ambiguous: it authenticates nothing.
    const values = ctx.req.headersDistinct["authorization"] ?? [];
    const header = values.length === 1 ? values[0] : undefined;
    caller = remembered ? await authenticateRemembered(credentials, header) : await authenticate(credentials, header);
  } catch (e) {
    throw translateDbError(e);
  }
  ctx.state.credentialId = caller.credentialId;
  if (route.permission !== "token") {
    if (!isAction(route.permission)) throw new Error(`unknown permission ${route.permission}`);
    try {
      requireAction(caller, route.permission);
    } catch (e) {
      if (remembered) await refuseIfRevoked(credentials, caller, e);
      throw e;
    }
  }
  return caller;
}

/**
 * A caller authenticated from memory is refused (4xx) only once its credential is found
 * active now: a revoked token gets 401 before any other answer (docs/protocol.md §1), as
 * it would from its own lookup. A refusal is rare on the worker's path, so this costs
 * nothing there.
 */
export async function refuseIfRevoked(credentials: CredentialLookups, caller: Caller, e: unknown): Promise<void> {
  if (!(e instanceof OrbitError) || e.status >= 500) return;
  if (e.code === "UNAUTHENTICATED") {
    // The transaction found the credential revoked: a lookup teaches the node's memory,
    // so the token's next requests are refused without a transaction of their own.
    void credentials.find(caller.credentialId).catch(() => undefined);
    return;
  }
  let now;
  try {
    now = await credentials.find(caller.credentialId);
  } catch (lookupError) {
    throw translateDbError(lookupError);
  }
  if (!now || now.revoked_at !== null) throw unauthenticated();
}

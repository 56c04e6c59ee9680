// `orbit bootstrap`: creates, by name, whatever of namespace, application and queues does
// not exist yet, plus a NEW credential scoped to the named queues, in one transaction.
// The token is returned once and never stored.
import type { Pool } from "../db/types.js";
import { withTransaction } from "../db/tx.js";
import {
  ensureStream,
  insertCredential,
  upsertApplication,
  upsertNamespace,
  upsertQueue,
} from "../db/queries/identity.js";
import { EVENT_ACTIONS, TASK_ACTIONS, issueToken, newId, type Action } from "./identity.js";

/** The name rule of docs/protocol.md §2, used for every operator-chosen name. */
export const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

export interface BootstrapInput {
  readonly namespace: string;
  readonly application: string;
  readonly queues: readonly string[];
  readonly eventAccess: boolean;
}

export interface BootstrapResult {
  namespace_id: string;
  application_id: string;
  credential_id: string;
  token: string;
  actions: Action[];
  queues: { id: string; name: string }[];
}

export function validateBootstrapInput(input: BootstrapInput): string | undefined {
  for (const [what, name] of [
    ["namespace", input.namespace],
    ["application", input.application],
    ...input.queues.map((q) => ["queue", q] as const),
  ] as const) {
    if (!NAME_RE.test(name))
      return `${what} name ${JSON.stringify(name.slice(0, 140))} must be 1-128 of A-Z a-z 0-9 . _ - starting with a letter or digit`;
  }
  if (input.queues.length === 0) return "at least one --queue is required";
  if (new Set(input.queues).size !== input.queues.length) return "a --queue is named twice";
  return undefined;
}

export async function bootstrap(pool: Pool, input: BootstrapInput): Promise<BootstrapResult> {
  const problem = validateBootstrapInput(input);
  if (problem) throw new Error(problem);
  // Without --event-access a credential may only work with tasks (docs/protocol.md §1).
  const actions: Action[] = input.eventAccess ? [...TASK_ACTIONS, ...EVENT_ACTIONS] : [...TASK_ACTIONS];
  return withTransaction(pool, async (tx) => {
    const namespaceId = await upsertNamespace(tx, newId(), input.namespace);
    await ensureStream(tx, namespaceId);
    const applicationId = await upsertApplication(tx, newId(), namespaceId, input.application);
    const queues: { id: string; name: string }[] = [];
    for (const name of input.queues) queues.push({ id: await upsertQueue(tx, newId(), namespaceId, name), name });
    const credentialId = newId();
    const issued = issueToken(credentialId);
    await insertCredential(
      tx,
      { id: credentialId, namespaceId, applicationId, digest: issued.digest, actions },
      queues.map((q) => q.id),
    );
    return {
      namespace_id: namespaceId,
      application_id: applicationId,
      credential_id: credentialId,
      token: issued.token,
      actions,
      queues,
    };
  });
}

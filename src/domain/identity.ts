// Credentials and the caller (docs/tasks.md).
// Token: "orbit_" + credential id (32 hex) + "_" + 43 base64url characters (32 random
// bytes). The database keeps only SHA-256 of the 32 secret bytes; comparison is
// constant time. The caller — namespace, application, credential, actions, queue scope —
// is resolved from the token alone.
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { newRowId } from "../wire/ids.js";
import type { Pool } from "../db/types.js";
import { selectCredentialWithQueues, type CredentialWithQueues } from "../db/queries/identity.js";
import { CredentialLookups } from "./credential-lookups.js";
import { decodeBase64urlCanonical, encodeBase64url } from "../wire/base64url.js";
import { permissionDenied, unauthenticated } from "../wire/errors.js";

export const ACTIONS = [
  "tasks:submit",
  "tasks:read",
  "tasks:cancel",
  "tasks:work",
  "tasks:review",
  "events:manage",
  "events:read",
  "events:consume",
] as const;
export type Action = (typeof ACTIONS)[number];

export const TASK_ACTIONS: readonly Action[] = ACTIONS.filter((a) => a.startsWith("tasks:"));
export const EVENT_ACTIONS: readonly Action[] = ACTIONS.filter((a) => a.startsWith("events:"));

export interface Caller {
  readonly namespaceId: string;
  readonly applicationId: string;
  readonly credentialId: string;
  readonly actions: ReadonlySet<Action>;
  readonly queues: ReadonlyMap<string, string>; // queue id → name
}

const SECRET_BYTES = 32;
const TOKEN_RE = /^orbit_([0-9a-f]{32})_([A-Za-z0-9_-]{43})$/;

/** A new entity id: 32 lowercase hex, time first (wire/ids.ts newRowId). */
export const newId = (): string => newRowId();

export function digestSecret(secret: Buffer): Buffer {
  return createHash("sha256").update(secret).digest();
}

export interface IssuedToken {
  readonly token: string;
  readonly digest: Buffer;
}

export function issueToken(credentialId: string): IssuedToken {
  const secret = randomBytes(SECRET_BYTES);
  return { token: `orbit_${credentialId}_${encodeBase64url(secret)}`, digest: digestSecret(secret) };
}

export interface ParsedToken {
  readonly credentialId: string;
  readonly secret: Buffer;
}

/** Parses a token; undefined for anything that is not exactly the canonical form. */
export function parseToken(token: string): ParsedToken | undefined {
  const m = TOKEN_RE.exec(token);
  if (!m) return undefined;
  try {
    return { credentialId: m[1]!, secret: decodeBase64urlCanonical(m[2]!, SECRET_BYTES) };
  } catch {
    return undefined;
  }
}

/**
 * Reads `Authorization: Bearer <token>`. The scheme is matched case-insensitively
 * (RFC 9110 §11.1); exactly one space separates it from the token.
 */
export function bearerToken(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  const m = /^bearer ([^\s]+)$/i.exec(header);
  return m ? m[1] : undefined;
}

// Compared against when the credential id is unknown, so that an unknown id and a wrong
// secret take the same path and the same time.
const DUMMY_DIGEST = digestSecret(Buffer.alloc(SECRET_BYTES));

/**
 * Resolves the caller from an Authorization header, or throws UNAUTHENTICATED. The
 * credential is read from the database, or through the node's shared lookups (HTTP).
 */
export async function authenticate(source: Pool | CredentialLookups, header: string | undefined): Promise<Caller> {
  const parsed = tokenOf(header);
  const row =
    source instanceof CredentialLookups
      ? await source.find(parsed.credentialId)
      : await selectCredentialWithQueues(source, parsed.credentialId);
  return callerFrom(parsed, row);
}

/**
 * The same from what the node remembers of the credential (credential-lookups.ts): only
 * for an operation whose own transaction then checks that the credential is not revoked
 * (http/caller.ts REVOCATION_IN_TRANSACTION), and that checks again before it answers an error
 * (http/caller.ts), so that a revoked token still gets 401 before anything else.
 */
export async function authenticateRemembered(lookups: CredentialLookups, header: string | undefined): Promise<Caller> {
  const parsed = tokenOf(header);
  return callerFrom(parsed, await lookups.recall(parsed.credentialId));
}

function tokenOf(header: string | undefined): ParsedToken {
  const token = bearerToken(header);
  const parsed = token === undefined ? undefined : parseToken(token);
  if (!parsed) throw unauthenticated();
  return parsed;
}

function callerFrom(parsed: ParsedToken, row: CredentialWithQueues | undefined): Caller {
  const presented = digestSecret(parsed.secret);
  const matches = timingSafeEqual(presented, row ? Buffer.from(row.secret_digest) : DUMMY_DIGEST);
  if (!row || !matches || row.revoked_at !== null) throw unauthenticated();
  return {
    namespaceId: row.namespace_id,
    applicationId: row.application_id,
    credentialId: row.id,
    actions: new Set(row.actions.split(",").filter((a): a is Action => (ACTIONS as readonly string[]).includes(a))),
    queues: new Map(row.queues.map((q) => [q.id, q.name])),
  };
}

/** Throws PERMISSION_DENIED unless the caller holds the action. */
export function requireAction(caller: Caller, action: Action): void {
  if (!caller.actions.has(action)) throw permissionDenied();
}

export function isAction(s: string): s is Action {
  return (ACTIONS as readonly string[]).includes(s);
}

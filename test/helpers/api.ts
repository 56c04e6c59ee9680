// Small typed helpers over the raw client for the common calls of the task API, and a
// direct credential factory for cases bootstrap does not make (a credential lacking an
// action). Tests still talk to a real `orbit serve` over HTTP.
import { randomBytes } from "node:crypto";
import { issueToken, newId } from "../../src/domain/identity.js";
import type { TestDatabase } from "./db.js";
import { request, type RawResponse } from "./http.js";

export interface Client {
  get(path: string): Promise<RawResponse>;
  post(path: string, body: unknown, key?: string | null): Promise<RawResponse>;
}

/** key: undefined → a fresh random Idempotency-Key; null → none sent. */
export function client(baseUrl: string, token: string): Client {
  return {
    get: (path) => request(baseUrl, { path, token }),
    post: (path, body, key) =>
      request(baseUrl, {
        method: "POST",
        path,
        token,
        headers: key === null ? [] : [["Idempotency-Key", key ?? randomBytes(8).toString("hex")]],
        body: typeof body === "string" ? body : JSON.stringify(body),
      }),
  };
}

/** Inserts a credential with exactly these actions and queues; returns its token. */
export async function makeCredential(
  db: TestDatabase,
  o: { namespaceId: string; applicationId: string; actions: string[]; queueIds: string[] },
): Promise<{ id: string; token: string }> {
  const id = newId();
  const { token, digest } = issueToken(id);
  const c = await db.connect();
  try {
    await c.query(
      "INSERT INTO credentials (id, namespace_id, application_id, secret_digest, actions, created_at) VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(3))",
      [id, o.namespaceId, o.applicationId, digest, o.actions.join(",")],
    );
    for (const q of o.queueIds)
      await c.query("INSERT INTO credential_queues (credential_id, queue_id) VALUES (?, ?)", [id, q]);
  } finally {
    await c.end();
  }
  return { id, token };
}

export interface LoggedEvent {
  sequence: string;
  id: string;
  type: string;
  aggregate_id: string;
  aggregate_revision: string;
  details: { state: string; reason: string };
  snapshot: Record<string, unknown>;
}

/** The namespace's committed head and the numbered events up to it, as a reader sees them. */
export async function readLog(db: TestDatabase, namespaceId: string): Promise<{ head: bigint; events: LoggedEvent[] }> {
  const c = await db.connect();
  try {
    const [s] = await c.query<any[]>("SELECT head_sequence FROM namespace_streams WHERE namespace_id = ?", [
      namespaceId,
    ]);
    const head = BigInt(s[0]?.head_sequence ?? 0);
    const [rows] = await c.query<any[]>(
      `SELECT sequence, id, type, aggregate_id, aggregate_revision, details, snapshot FROM result_events
        WHERE namespace_id = ? AND sequence <= ? ORDER BY sequence`,
      [namespaceId, head.toString()],
    );
    return {
      head,
      events: rows.map((r) => ({
        ...r,
        sequence: String(r.sequence),
        aggregate_revision: String(r.aggregate_revision),
        details: JSON.parse(r.details),
        snapshot: JSON.parse(r.snapshot),
      })),
    };
  } finally {
    await c.end();
  }
}

/** Waits until every committed event of the namespace is numbered. */
export async function waitSequenced(db: TestDatabase, namespaceId: string, timeoutMs = 15000): Promise<void> {
  const c = await db.connect();
  try {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const [r] = await c.query<any[]>(
        "SELECT COUNT(*) AS n FROM result_events WHERE namespace_id = ? AND sequence IS NULL",
        [namespaceId],
      );
      if (Number(r[0].n) === 0) return;
      if (Date.now() > until) throw new Error("events stayed unnumbered");
      await new Promise((res) => setTimeout(res, 50));
    }
  } finally {
    await c.end();
  }
}

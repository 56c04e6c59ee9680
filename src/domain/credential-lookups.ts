// Every HTTP request authenticates: one credential lookup each, except a submit, a
// worker's claim and its calls on its attempt (below). Requests that arrive while the
// node's lookups are in flight wait for the next one and share it — one statement for all
// their credentials (the 16 workers of an application share one). A request is answered only from a lookup that
// started after it arrived, so a revocation committed before the request is always
// seen (docs/tasks.md: a revoked token authenticates nothing from then on).
//
// The node also remembers each credential it found. Of a credential nothing changes
// after it is created but its revocation (identity.ts: no API narrows one), and a
// revocation is final, so what is remembered is exact except for a revocation since.
// Only an operation that checks revocation inside its own transaction may authenticate
// from it (http/caller.ts REVOCATION_IN_TRANSACTION): the task path's requests then save
// the lookup's round trip, a large share of the round trips per task.
import type { Pool } from "../db/types.js";
import { selectCredentialsWithQueues, type CredentialWithQueues } from "../db/queries/identity.js";

/** Lookups in flight at once; more requests than this wait and go together. */
const LOOKUPS_IN_FLIGHT = 2;
/** Credentials per lookup at most. */
const MAX_IDS = 64;
/**
 * Credentials remembered at most; past it the memory starts again empty. Only
 * credentials that exist get in, and a request's own lookup refills its entry: this
 * bounds the memory (~1 KiB each) on a node that serves very many credentials.
 */
const MAX_REMEMBERED = 10_000;

interface Waiter {
  resolve(row: CredentialWithQueues | undefined): void;
  reject(e: unknown): void;
}

export class CredentialLookups {
  /** By credential id, in arrival order. */
  private readonly waiting = new Map<string, Waiter[]>();
  private inFlight = 0;
  /** Each credential as last found: its revoked_at may be older than a revocation since. */
  private readonly remembered = new Map<string, CredentialWithQueues>();

  constructor(private readonly pool: Pool) {}

  /** The credential as it is now: from a lookup that starts after this call. */
  find(credentialId: string): Promise<CredentialWithQueues | undefined> {
    return new Promise((resolve, reject) => {
      const list = this.waiting.get(credentialId);
      if (list) list.push({ resolve, reject });
      else this.waiting.set(credentialId, [{ resolve, reject }]);
      this.next();
    });
  }

  /**
   * The credential as this node last found it, without a round trip: a revoked one is
   * revoked for good, an active one may have been revoked since (the caller's
   * transaction must check). A credential not found before is looked up as by `find`.
   */
  async recall(credentialId: string): Promise<CredentialWithQueues | undefined> {
    return this.remembered.get(credentialId) ?? this.find(credentialId);
  }

  private next(): void {
    while (this.inFlight < LOOKUPS_IN_FLIGHT && this.waiting.size > 0) {
      const batch = [...this.waiting.entries()].slice(0, MAX_IDS);
      for (const [id] of batch) this.waiting.delete(id);
      this.inFlight++;
      selectCredentialsWithQueues(
        this.pool,
        batch.map(([id]) => id),
      )
        .then(
          (found) => {
            this.remember(found.values());
            batch.forEach(([id, waiters]) => waiters.forEach((w) => w.resolve(found.get(id))));
          },
          (e: unknown) => batch.forEach(([, waiters]) => waiters.forEach((w) => w.reject(e))),
        )
        .finally(() => {
          this.inFlight--;
          this.next();
        });
    }
  }

  private remember(found: Iterable<CredentialWithQueues>): void {
    for (const c of found) {
      // A lookup that started before a revocation may end after one that started after it.
      if (this.remembered.get(c.id)?.revoked_at) continue;
      if (this.remembered.size >= MAX_REMEMBERED && !this.remembered.has(c.id)) this.remembered.clear();
      this.remembered.set(c.id, c);
    }
  }
}

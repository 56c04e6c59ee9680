// Every HTTP request authenticates: one credential lookup each. Requests that arrive
// while the node's lookups are in flight wait for the next one and share it — one
// statement for all their credentials (the 16 workers of an application share one).
// A request is answered only from a lookup that started after it arrived, so a
// revocation committed before the request is always seen (platform.md: a revoked
// token authenticates nothing from then on). Nothing is cached.
import type { Pool } from "../db/types.js";
import { selectCredentialsWithQueues, type CredentialWithQueues } from "../db/queries/identity.js";

/** Lookups in flight at once; more requests than this wait and go together. */
const LOOKUPS_IN_FLIGHT = 2;
/** Credentials per lookup at most. */
const MAX_IDS = 64;

interface Waiter {
  resolve(row: CredentialWithQueues | undefined): void;
  reject(e: unknown): void;
}

export class CredentialLookups {
  /** By credential id, in arrival order. */
  private readonly waiting = new Map<string, Waiter[]>();
  private inFlight = 0;

  constructor(private readonly pool: Pool) {}

  find(credentialId: string): Promise<CredentialWithQueues | undefined> {
    return new Promise((resolve, reject) => {
      const list = this.waiting.get(credentialId);
      if (list) list.push({ resolve, reject });
      else this.waiting.set(credentialId, [{ resolve, reject }]);
      this.next();
    });
  }

  private next(): void {
    while (this.inFlight < LOOKUPS_IN_FLIGHT && this.waiting.size > 0) {
      const batch = [...this.waiting.entries()].slice(0, MAX_IDS);
      for (const [id] of batch) this.waiting.delete(id);
      this.inFlight++;
      selectCredentialsWithQueues(this.pool, batch.map(([id]) => id))
        .then(
          (found) => batch.forEach(([id, waiters]) => waiters.forEach((w) => w.resolve(found.get(id)))),
          (e: unknown) => batch.forEach(([, waiters]) => waiters.forEach((w) => w.reject(e))),
        )
        .finally(() => {
          this.inFlight--;
          this.next();
        });
    }
  }
}

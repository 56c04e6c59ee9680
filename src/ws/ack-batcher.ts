// Commits the ACKs that arrive within a 1 ms window, from any connection of a
// subscription, in one transaction: one ACK per commit would cap a node's deliveries at
// its commit rate. Each ACK's reply is still sent only after that commit: an ACK is
// durable before it is confirmed.
import type { Pool } from "../db/types.js";
import { ack, type AckOutcome, type AckProof } from "../domain/delivery-acks.js";

interface Pending {
  readonly proof: AckProof;
  resolve(o: AckOutcome): void;
  reject(e: unknown): void;
}

interface Who {
  readonly subscriptionId: string;
  readonly namespaceId: string;
  readonly credentialId: string;
}

/** At most this many ACKs in one transaction. */
const MAX_BATCH = 64;
/**
 * How long the first ACK of a batch waits for others: 1 ms of latency for several ACKs
 * per commit (each commit costs about as much as the ACK work itself). Short, because an
 * ACK's reply frees its connection's slot: a longer window slows the drain.
 */
const BATCH_WINDOW_MS = 1;

export class AckBatcher {
  private readonly queues = new Map<string, { who: Who; items: Pending[] }>();
  private readonly inFlight = new Set<Promise<void>>();

  constructor(private readonly pool: Pool) {}

  submit(who: Who, proof: AckProof): Promise<AckOutcome> {
    return new Promise((resolve, reject) => {
      const key = `${who.subscriptionId}/${who.credentialId}`;
      let q = this.queues.get(key);
      if (!q) {
        q = { who, items: [] };
        this.queues.set(key, q);
        setTimeout(() => this.flush(key), BATCH_WINDOW_MS);
      }
      q.items.push({ proof, resolve, reject });
    });
  }

  private flush(key: string): void {
    const q = this.queues.get(key);
    if (!q) return;
    this.queues.delete(key);
    for (let i = 0; i < q.items.length; i += MAX_BATCH) {
      const batch = q.items.slice(i, i + MAX_BATCH);
      const p = ack(
        this.pool,
        q.who,
        batch.map((b) => b.proof),
      ).then(
        (outcomes) => batch.forEach((b, j) => b.resolve(outcomes[j]!)),
        (e: unknown) => batch.forEach((b) => b.reject(e)),
      );
      const tracked = p.finally(() => this.inFlight.delete(tracked));
      this.inFlight.add(tracked);
    }
  }

  /** Resolves when every ACK submitted so far is committed (or failed). */
  async drain(): Promise<void> {
    await new Promise((r) => setTimeout(r, BATCH_WINDOW_MS + 1));
    await Promise.all([...this.inFlight]);
  }
}

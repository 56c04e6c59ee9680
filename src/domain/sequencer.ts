// Runs the result-log sequencer for a node: right after this node commits an event
// (kick), and on a slow sweep that numbers events another node committed and could not
// number (it died, or its database connection broke). One run per namespace at a time
// on a node; nodes take turns through the stream row lock.
import type { Pool } from "../db/types.js";
import { selectNamespacesWithUnsequenced } from "../db/queries/result-log.js";
import { describeError, type Logger } from "../log/index.js";
import { SEQUENCE_BATCH, sequenceBatch } from "./result-log.js";

/** How long a kick waits for more commits before numbering (see kick). */
const GATHER_MS = 2;

/**
 * After a failed pass, the next one after 50, 100, 200, 400 and 800 ms (1.55 s in all),
 * then only the sweep's (every 5 s). A pass fails whenever its connection does, also
 * right after its COMMIT (the reply lost): the kicks of events committed meanwhile were
 * folded into that pass, and without a retry those events would wait for the sweep, up
 * to 5 s unnumbered and undelivered. Bounded and backing off, so that a database that is
 * down is asked at most 6 times per kick (and kicks come from commits, which then fail).
 */
const RETRY_DELAYS_MS = [50, 100, 200, 400, 800];

export class Sequencer {
  private readonly running = new Map<string, Promise<void>>();
  private readonly again = new Set<string>();
  private readonly listeners = new Set<(namespaceId: string) => void>();

  constructor(
    private readonly pool: Pool,
    private readonly log: Logger,
  ) {}

  /** Called with a namespace whenever its head moved (delivery wakes up on it). */
  onAdvance(listener: (namespaceId: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Numbers what is committed in the namespace, right after the current run, or after a
   * short gathering window: under load one sequencer transaction then numbers the events
   * of many commits (it costs 2 round trips whatever the batch), for 2 ms of latency.
   */
  kick(namespaceId: string): Promise<void> {
    const current = this.running.get(namespaceId);
    if (current) {
      this.again.add(namespaceId);
      return current;
    }
    const run = new Promise((r) => setTimeout(r, GATHER_MS))
      .then(() => this.run(namespaceId))
      .finally(() => this.running.delete(namespaceId));
    this.running.set(namespaceId, run);
    return run;
  }

  /** Numbers until nothing is left, retrying a failed pass (RETRY_DELAYS_MS); then the sweep retries. */
  private async run(namespaceId: string): Promise<void> {
    for (let failures = 0; ; failures++) {
      try {
        return await this.numberAll(namespaceId);
      } catch (e) {
        const retryInMs = RETRY_DELAYS_MS[failures];
        // Nothing is lost while events wait unnumbered; retried, a pass numbers what is left.
        this.log.log("warn", "sequencer failed", {
          namespace_id: namespaceId,
          ...describeError(e),
          ...(retryInMs !== undefined ? { retry_in_ms: retryInMs } : {}),
        });
        if (retryInMs === undefined) return;
        await new Promise((r) => setTimeout(r, retryInMs));
      }
    }
  }

  private async numberAll(namespaceId: string): Promise<void> {
    for (;;) {
      this.again.delete(namespaceId);
      const n = await sequenceBatch(this.pool, namespaceId);
      if (n > 0) for (const l of this.listeners) l(namespaceId);
      if (n < SEQUENCE_BATCH && !this.again.has(namespaceId)) return;
    }
  }

  /** Finds namespaces with unnumbered events and numbers them. */
  async sweep(): Promise<void> {
    let namespaces: string[];
    try {
      namespaces = await selectNamespacesWithUnsequenced(this.pool);
    } catch (e) {
      this.log.log("warn", "sequencer sweep failed", describeError(e));
      return;
    }
    await Promise.all(namespaces.map((ns) => this.kick(ns)));
  }

  /** Resolves when every run in progress has finished. */
  async idle(): Promise<void> {
    await Promise.all([...this.running.values()]);
  }
}

// The optional limit on a namespace's QUEUED tasks (ORBIT_MAX_QUEUED_TASKS_PER_NAMESPACE,
// docs/tasks.md): once a namespace has that many tasks waiting for a worker, a submit is
// refused with 429 CAPACITY_EXCEEDED until workers catch up. Counting inside every submit's
// transaction would add a range read of the namespace's queues to the hottest write, so
// each node keeps a count per namespace, read again in the background once it is older
// than REFRESH_MS, plus the submits the node accepted since. The limit is soft by what the
// other nodes accept within that time.
import { countQueued } from "../db/queries/tasks.js";
import type { Pool } from "../db/types.js";

export const QUOTA_REFRESH_MS = 1000;
/** Namespaces not submitted to for this long are forgotten, so the map stays small. */
const FORGET_MS = 60_000;

interface Count {
  queued: number;
  /** When the count was read (performance.now(): skew and clock steps do not matter); undefined until a read succeeded. */
  readAt: number | undefined;
  usedAt: number;
  reading: Promise<void> | undefined;
}

export class QueuedTaskQuota {
  private readonly counts = new Map<string, Count>();

  constructor(
    private readonly pool: Pool,
    readonly max: number,
  ) {}

  /**
   * Whether the namespace has its maximum of QUEUED tasks. The first submit to a namespace
   * waits for its count; later ones use the last count and refresh it in the background.
   */
  async full(namespaceId: string): Promise<boolean> {
    const now = performance.now();
    let c = this.counts.get(namespaceId);
    if (!c) {
      this.forgetIdle(now);
      c = { queued: 0, readAt: undefined, usedAt: now, reading: undefined };
      this.counts.set(namespaceId, c);
    }
    c.usedAt = now;
    if (c.readAt === undefined) await this.read(namespaceId, c);
    else if (now - c.readAt > QUOTA_REFRESH_MS) this.read(namespaceId, c).catch(() => undefined);
    return c.queued >= this.max;
  }

  /** A submit to the namespace committed: it counts until the next read includes it. */
  accepted(namespaceId: string): void {
    const c = this.counts.get(namespaceId);
    if (c) c.queued++;
  }

  private read(namespaceId: string, c: Count): Promise<void> {
    c.reading ??= countQueued(this.pool, namespaceId, this.max)
      .then((n) => {
        c.queued = n;
        c.readAt = performance.now();
      })
      .finally(() => (c.reading = undefined));
    return c.reading;
  }

  private forgetIdle(now: number): void {
    for (const [ns, c] of this.counts) if (now - c.usedAt > FORGET_MS && !c.reading) this.counts.delete(ns);
  }
}

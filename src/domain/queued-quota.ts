// The optional limit on a namespace's QUEUED tasks (ORBIT_MAX_QUEUED_TASKS_PER_NAMESPACE,
// docs/tasks.md): once a namespace has that many tasks waiting for a worker, a submit is
// refused with 429 CAPACITY_EXCEEDED until workers catch up. Counting inside every submit's
// transaction would add a range read of the namespace's queues to the hottest write, so
// each node keeps a count per namespace: the QUEUED tasks it last read, plus the submits
// it accepted since that read began and those under way. The count is read again once it
// is older than QUOTA_REFRESH_MS: in the background while it allows a submit, before the
// answer when it would refuse one. The limit is soft by what the other nodes accept
// within that time.
import { countQueued } from "../db/queries/tasks.js";
import type { Pool } from "../db/types.js";

export const QUOTA_REFRESH_MS = 1000;
/** Namespaces not submitted to for this long are forgotten, so the map stays small. */
const FORGET_MS = 60_000;

interface Count {
  /** QUEUED tasks at the last read. */
  queued: number;
  /** Submits this node committed since that read began (some may be in it: counting them twice only errs on the safe side). */
  accepted: number;
  /** Submits of this node under way. */
  reserved: number;
  /** When the count was read (performance.now(): clock steps do not matter); undefined until a read succeeded. */
  readAt: number | undefined;
  usedAt: number;
  reading: Promise<void> | undefined;
}

/** Ends a reservation: `committed` when the submit wrote a new task. */
export type EndReservation = (committed: boolean) => void;

export class QueuedTaskQuota {
  private readonly counts = new Map<string, Count>();

  constructor(
    private readonly pool: Pool,
    readonly max: number,
  ) {}

  /**
   * A place for one submit to the namespace, or undefined when it has its maximum of
   * QUEUED tasks. The caller ends the reservation once its transaction is over.
   */
  async reserve(namespaceId: string): Promise<EndReservation | undefined> {
    const now = performance.now();
    let c = this.counts.get(namespaceId);
    if (!c) {
      this.forgetIdle(now);
      c = { queued: 0, accepted: 0, reserved: 0, readAt: undefined, usedAt: now, reading: undefined };
      this.counts.set(namespaceId, c);
    }
    c.usedAt = now;
    const stale = c.readAt === undefined || now - c.readAt > QUOTA_REFRESH_MS;
    if (stale && (c.readAt === undefined || this.over(c))) await this.read(namespaceId, c);
    else if (stale) this.read(namespaceId, c).catch(() => undefined);
    if (this.over(c)) return undefined;
    const count = c;
    count.reserved++;
    let ended = false;
    return (committed) => {
      if (ended) return;
      ended = true;
      count.reserved--;
      if (committed) count.accepted++;
    };
  }

  private over(c: Count): boolean {
    return c.queued + c.accepted + c.reserved >= this.max;
  }

  private read(namespaceId: string, c: Count): Promise<void> {
    c.reading ??= (async () => {
      const acceptedBefore = c.accepted;
      const n = await countQueued(this.pool, namespaceId, this.max);
      c.queued = n;
      c.accepted -= acceptedBefore;
      c.readAt = performance.now();
    })().finally(() => (c.reading = undefined));
    return c.reading;
  }

  private forgetIdle(now: number): void {
    for (const [ns, c] of this.counts)
      if (now - c.usedAt > FORGET_MS && !c.reading && c.reserved === 0) this.counts.delete(ns);
  }
}

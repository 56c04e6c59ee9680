// The claim pool of docs/protocol.md §5 (node protection): at most CLAIM_POOL_GLOBAL claims
// in flight on the node and CLAIM_POOL_PER_APPLICATION per application; at most
// CLAIM_POOL_QUEUE connections waiting plus in flight; each scan round starts at most
// CLAIMS_PER_SCAN_ROUND claims, taken in rotation by application, then subscription, so one
// busy tenant cannot starve another. Claims run on their own small database pool, apart
// from ACK, ping and hello traffic. These bound this node's work; who may claim what, and
// how much, is still decided by the database.
//
// One claim serves every connection of the subscription that is waiting when it starts:
// one transaction leases for all of them (up to 4 × 8 deliveries instead of 8). A
// subscription's drain is bounded by one claim in flight per application, so the
// deliveries per claim are its throughput (bench/README.md).
import {
  CLAIM_POOL_GLOBAL,
  CLAIM_POOL_PER_APPLICATION,
  CLAIM_POOL_QUEUE,
  CLAIMS_PER_SCAN_ROUND,
} from "../config/limits.js";
import { claimsInFlight, claimsWaiting } from "../metrics.js";

/**
 * At most this many connections in one claim (16 × 8 write slots = 128 deliveries): the
 * claim reads every seat's held count in one GROUP_CONCAT, and 16 × 37 characters stays
 * well inside MariaDB's default group_concat_max_len of 1024.
 */
export const MAX_SEATS_PER_CLAIM = 16;

export interface Claimant {
  readonly applicationId: string;
  readonly subscriptionId: string;
}

/** Runs one claim for connections of one subscription and sends what it leased; never throws. */
export type RunClaim<C extends Claimant> = (batch: readonly C[]) => Promise<void>;

export class ClaimScheduler<C extends Claimant = Claimant> {
  /** application → subscription → connections waiting for a claim, in arrival order. */
  private readonly waiting = new Map<string, Map<string, Set<C>>>();
  private readonly inFlightByApp = new Map<string, number>();
  private readonly inFlight = new Set<Promise<void>>();
  /** Asked again while in flight: claim once more afterwards. */
  private readonly again = new Set<C>();
  private readonly running = new Set<C>();
  private waitingCount = 0;
  private stopped = false;
  private scanScheduled = false;

  constructor(private readonly run: RunClaim<C>) {}

  /** Asks for a claim for this connection; a no-op while one waits or runs for it. */
  request(c: C): void {
    if (this.stopped) return;
    if (this.running.has(c)) {
      this.again.add(c);
      return;
    }
    const subs = this.waiting.get(c.applicationId) ?? new Map<string, Set<C>>();
    const set = subs.get(c.subscriptionId) ?? new Set<C>();
    if (set.has(c)) return;
    if (this.waitingCount + this.running.size >= CLAIM_POOL_QUEUE) return; // asked again by its next trigger
    set.add(c);
    subs.set(c.subscriptionId, set);
    this.waiting.set(c.applicationId, subs);
    this.waitingCount++;
    this.scheduleScan();
  }

  /**
   * Scans once the current event-loop turn is done (setImmediate, coalesced): requests of
   * the same turn share a claim, and so do the connections whose frames the last claim
   * just wrote — their write callbacks, which ask for the next claim, run after the
   * promise that ends that claim. Scanning at once would serve only about half of a
   * subscription's connections per claim.
   */
  private scheduleScan(): void {
    if (this.scanScheduled) return;
    this.scanScheduled = true;
    setImmediate(() => {
      this.scanScheduled = false;
      this.scan();
    });
  }

  remove(c: C): void {
    const subs = this.waiting.get(c.applicationId);
    const set = subs?.get(c.subscriptionId);
    if (set?.delete(c)) this.waitingCount--;
    if (set && set.size === 0) subs!.delete(c.subscriptionId);
    if (subs && subs.size === 0) this.waiting.delete(c.applicationId);
    this.again.delete(c);
  }

  /** One scan round: start up to CLAIMS_PER_SCAN_ROUND claims, rotating fairly. */
  private scan(): void {
    let started = 0;
    while (started < CLAIMS_PER_SCAN_ROUND && this.inFlight.size < CLAIM_POOL_GLOBAL) {
      const next = this.takeNext();
      if (!next) break;
      this.start(next);
      started++;
    }
    claimsInFlight.set(this.inFlight.size);
    claimsWaiting.set(this.waitingCount);
  }

  /**
   * The waiting connections of the first subscription of the first application with a
   * free slot; that subscription and its application go to the back of the rotation.
   */
  private takeNext(): C[] | undefined {
    for (const [app, subs] of this.waiting) {
      if ((this.inFlightByApp.get(app) ?? 0) >= CLAIM_POOL_PER_APPLICATION) continue;
      const [sub, set] = subs.entries().next().value as [string, Set<C>];
      const batch = [...set].slice(0, MAX_SEATS_PER_CLAIM);
      for (const c of batch) set.delete(c);
      this.waitingCount -= batch.length;
      subs.delete(sub);
      if (set.size > 0) subs.set(sub, set);
      this.waiting.delete(app);
      if (subs.size > 0) this.waiting.set(app, subs);
      return batch;
    }
    return undefined;
  }

  private start(batch: C[]): void {
    const app = batch[0]!.applicationId;
    for (const c of batch) this.running.add(c);
    this.inFlightByApp.set(app, (this.inFlightByApp.get(app) ?? 0) + 1);
    const p = this.run(batch).finally(() => {
      this.inFlight.delete(p);
      const n = (this.inFlightByApp.get(app) ?? 1) - 1;
      if (n === 0) this.inFlightByApp.delete(app);
      else this.inFlightByApp.set(app, n);
      for (const c of batch) {
        this.running.delete(c);
        if (this.again.delete(c)) this.request(c);
      }
      this.scheduleScan();
    });
    this.inFlight.add(p);
  }

  get inFlightCount(): number {
    return this.inFlight.size;
  }

  /** Shutdown: start no more claims; resolves when those in flight have finished. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.waiting.clear();
    this.waitingCount = 0;
    this.again.clear();
    await Promise.all([...this.inFlight]);
  }
}

// The claim pool of spec §5 (node protection): at most CLAIM_POOL_GLOBAL claims in flight
// on the node and CLAIM_POOL_PER_APPLICATION per application; at most CLAIM_POOL_QUEUE
// waiting plus in flight; each scan round starts at most CLAIMS_PER_SCAN_ROUND claims,
// taken in rotation by application, then subscription, then connection, so one busy
// tenant cannot starve another. Claims run on their own small database pool, apart from
// ACK, ping and hello traffic. These bound this node's work; who may claim what, and how
// much, is still decided by the database.
import { CLAIM_POOL_GLOBAL, CLAIM_POOL_PER_APPLICATION, CLAIM_POOL_QUEUE, CLAIMS_PER_SCAN_ROUND } from "../config/limits.js";
import { claimsInFlight, claimsWaiting } from "../metrics.js";

export interface Claimant {
  readonly applicationId: string;
  readonly subscriptionId: string;
  /** Runs one claim and sends what it leased; never throws. */
  runClaim(): Promise<void>;
}

export class ClaimScheduler {
  /** application → subscription → claimants waiting for a claim, in arrival order. */
  private readonly waiting = new Map<string, Map<string, Set<Claimant>>>();
  private readonly inFlightByApp = new Map<string, number>();
  private readonly inFlight = new Set<Promise<void>>();
  /** Asked again while in flight: claim once more afterwards. */
  private readonly again = new Set<Claimant>();
  private readonly running = new Set<Claimant>();
  private waitingCount = 0;
  private stopped = false;

  /** Asks for a claim for this connection; a no-op while one waits or runs for it. */
  request(c: Claimant): void {
    if (this.stopped) return;
    if (this.running.has(c)) {
      this.again.add(c);
      return;
    }
    const subs = this.waiting.get(c.applicationId) ?? new Map<string, Set<Claimant>>();
    const set = subs.get(c.subscriptionId) ?? new Set<Claimant>();
    if (set.has(c)) return;
    if (this.waitingCount + this.inFlight.size >= CLAIM_POOL_QUEUE) return; // asked again by its next trigger
    set.add(c);
    subs.set(c.subscriptionId, set);
    this.waiting.set(c.applicationId, subs);
    this.waitingCount++;
    queueMicrotask(() => this.scan());
  }

  remove(c: Claimant): void {
    const subs = this.waiting.get(c.applicationId);
    const set = subs?.get(c.subscriptionId);
    if (set?.delete(c)) this.waitingCount--;
    if (set && set.size === 0) subs!.delete(c.subscriptionId);
    if (subs && subs.size === 0) this.waiting.delete(c.applicationId);
    this.again.delete(c);
  }

  /** One scan round: start up to CLAIMS_PER_SCAN_ROUND claims, rotating fairly. */
  private scan(): void {
    this.publish();
    let started = 0;
    while (started < CLAIMS_PER_SCAN_ROUND && this.inFlight.size < CLAIM_POOL_GLOBAL) {
      const next = this.takeNext();
      if (!next) return;
      this.start(next);
      started++;
    }
    this.publish();
  }

  private publish(): void {
    claimsInFlight.set(this.inFlight.size);
    claimsWaiting.set(this.waitingCount);
  }

  /** The first waiting claimant of the first application with a free slot; rotates all three levels. */
  private takeNext(): Claimant | undefined {
    for (const [app, subs] of this.waiting) {
      if ((this.inFlightByApp.get(app) ?? 0) >= CLAIM_POOL_PER_APPLICATION) continue;
      const [sub, set] = subs.entries().next().value as [string, Set<Claimant>];
      const c = set.values().next().value as Claimant;
      set.delete(c);
      this.waitingCount--;
      // Rotate: the connection, its subscription and its application go to the back.
      subs.delete(sub);
      if (set.size > 0) subs.set(sub, set);
      this.waiting.delete(app);
      if (subs.size > 0) this.waiting.set(app, subs);
      return c;
    }
    return undefined;
  }

  private start(c: Claimant): void {
    this.running.add(c);
    this.inFlightByApp.set(c.applicationId, (this.inFlightByApp.get(c.applicationId) ?? 0) + 1);
    const p = c.runClaim().finally(() => {
      this.running.delete(c);
      this.inFlight.delete(p);
      const n = (this.inFlightByApp.get(c.applicationId) ?? 1) - 1;
      if (n === 0) this.inFlightByApp.delete(c.applicationId);
      else this.inFlightByApp.set(c.applicationId, n);
      if (this.again.delete(c)) this.request(c);
      this.scan();
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

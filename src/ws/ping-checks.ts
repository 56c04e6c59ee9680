// How often a connection's pings re-check its credential and subscription (docs/protocol.md
// §7): up to PING_CHECKS_PER_SECOND a second; a ping beyond them is answered from the last
// check, so a client that pings without pause costs a bounded amount of database work.
import { PING_CHECKS_PER_SECOND } from "../config/limits.js";

/** What a ping's check read: the subscription's `enabled` and its backlog. */
export interface PingCheck {
  readonly enabled: boolean;
  readonly backlog: number;
}

export class PingChecks {
  private last: PingCheck | undefined;
  private windowStart = 0;
  private checksInWindow = 0;

  /** The last check, when this ping is one too many for the current second; else undefined (check now). */
  recent(): PingCheck | undefined {
    // A monotonic clock: a wall clock stepped back would keep the window from ending.
    const now = performance.now();
    if (now - this.windowStart >= 1000) {
      this.windowStart = now;
      this.checksInWindow = 0;
    }
    if (this.last && this.checksInWindow >= PING_CHECKS_PER_SECOND) return this.last;
    this.checksInWindow++;
    return undefined;
  }

  /** Records what a check read. */
  checked(c: PingCheck): void {
    this.last = c;
  }
}

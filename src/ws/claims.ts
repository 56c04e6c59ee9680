// One claim for the waiting sessions of one subscription (the claim scheduler hands them
// over together): a single transaction leases for all of them, and each session sends its
// frames only after the leases are committed (docs/protocol.md §6).
import type { Pool } from "../db/types.js";
import { claim, type ClaimOutcome, type SeatOutcome } from "../domain/delivery-engine.js";
import * as metrics from "../metrics.js";
import type { ReadySeat } from "./seat.js";

/** What a claim needs of a session. */
export interface ClaimingSession {
  readonly subscriptionId: string;
  /** The session's part of this claim, or undefined when it has no room for one now. */
  claimSeat(): ReadySeat | undefined;
  /** The claim committed: send what was leased to this session (`slots`: what it asked for). */
  claimed(paused: boolean, out: SeatOutcome, slots: number): void;
  /** The claim failed: the session ends with the failure's error. */
  claimFailed(e: unknown): void;
}

/** Claims for `batch` (sessions of one subscription) on `pool`. Never throws. */
export async function runClaims(batch: readonly ClaimingSession[], pool: Pool, leaseDurationMs: number): Promise<void> {
  const ready: ClaimingSession[] = [];
  const seats: ReadySeat[] = [];
  for (const c of batch) {
    const seat = c.claimSeat();
    if (!seat) continue;
    ready.push(c);
    seats.push(seat);
  }
  if (ready.length === 0) return;
  let out: ClaimOutcome;
  const stop = metrics.claimDuration.startTimer();
  try {
    out = await claim(pool, { subscriptionId: ready[0]!.subscriptionId, leaseDurationMs, seats });
  } catch (e) {
    for (const c of ready) c.claimFailed(e);
    return;
  } finally {
    stop();
  }
  metrics.claimLeases.observe(out.seats.reduce((n, seat) => n + seat.leases.length, 0));
  ready.forEach((c, k) => c.claimed(out.paused, out.seats[k]!, seats[k]!.maxLeases));
}

// A session's seat on its subscription: how many deliveries it may hold (the hello's
// capacity), how many the database last said it holds, whether the subscription was
// paused at the last claim, and which deliveries the client holds by its own count. The
// database decides every lease; the seat only decides when asking for a claim is worth it.
import { WRITE_QUEUE_PER_CONNECTION } from "../config/limits.js";
import type { ClaimSeat } from "../domain/delivery-engine.js";

/** An ACK refills the session once this many slots are free (or half its capacity). */
const REFILL_BATCH = 8;

/** A seat in a claim, with its limit always set: the session's free write slots. */
export type ReadySeat = ClaimSeat & { readonly maxLeases: number };

export class Seat {
  /** The hello's capacity; 0 until the session is bound. */
  capacity = 0;
  /** LEASED deliveries of the session after its last claim, less those ACKed since. */
  private held = 0;
  /** The subscription was paused at the last claim (or at the hello). */
  private paused = false;
  /**
   * Deliveries sent and not yet answered by an ACK reply: lease_until (ms), send order.
   * The database decides capacity; this keeps the client's own count within it too: a
   * claim may count a slot freed by an ACK that is committed but not yet answered, and
   * the delivery that fills it would then reach the client before that ACK's reply.
   */
  private readonly outstanding = new Map<string, { until: number; n: number }>();
  /** How many deliveries this session has sent: `n` of each, in order. */
  private sends = 0;
  /**
   * Deliveries whose ACK came on this connection and is not answered yet: their reply must
   * reach the client before a delivery that takes their slot, so only that reply frees it.
   */
  private readonly unanswered = new Set<string>();
  /** Claim again once the write queue is empty (a full batch left more to take). */
  private refillWhenFlushed = false;

  bind(capacity: number, enabled: boolean): void {
    this.capacity = capacity;
    this.paused = !enabled;
  }

  /**
   * Whether a claim could give the session a delivery now: below the held count of its
   * last claim, or below capacity by the client's own count. The held count goes stale
   * when a lease of the session runs out or is re-sent elsewhere (its late ACK is
   * DELIVERY_LEASE_LOST); the client's count keeps a full session from waiting for its
   * recheck to take new results. The claim reads the held count again.
   */
  wantsClaim(): boolean {
    return !this.paused && (this.held < this.capacity || this.room() > 0);
  }

  /** The subscription may have become claimable: the next claim will tell if it still is paused. */
  unpause(): void {
    this.paused = false;
  }

  /**
   * A ping's read of the subscription says a claim may find something: it was paused
   * here, or its backlog holds more than this session's own leases.
   */
  behind(backlog: number): boolean {
    return this.paused || backlog > this.held;
  }

  /**
   * How many more deliveries the client could hold by its own count: capacity minus those
   * sent and not yet answered. A lease that ran out no longer counts (the database
   * recovers it; a late ACK of it is answered either way).
   */
  room(): number {
    const now = Date.now();
    for (const [id, { until }] of this.outstanding) if (until <= now) this.outstanding.delete(id);
    return Math.max(0, this.capacity - this.outstanding.size);
  }

  /**
   * The session's part of the next claim, or undefined when it has no room. A session
   * whose write queue is full sits this claim out and claims again once it flushes.
   */
  claimSeat(sessionId: string, unflushed: number): ReadySeat | undefined {
    const room = this.room();
    if (room === 0) return undefined;
    if (unflushed >= WRITE_QUEUE_PER_CONNECTION) {
      this.refillWhenFlushed = true;
      return undefined;
    }
    return { sessionId, capacity: this.capacity, maxLeases: Math.min(WRITE_QUEUE_PER_CONNECTION - unflushed, room) };
  }

  /** A claim's answer: the subscription's state and what the session holds now. */
  claimed(paused: boolean, held: number): void {
    this.held = held;
    this.paused = paused;
  }

  /** A delivery sent to the client, leased until `leaseUntil` (ms). */
  sent(deliveryId: string, leaseUntil: number): void {
    this.outstanding.set(deliveryId, { until: leaseUntil, n: ++this.sends });
  }

  /**
   * After a claim's frames are sent: a full batch may leave more to take, so ask again once
   * these frames are written (a claim leaves out a session whose write queue is full).
   */
  refillIfFull(leased: number, slots: number): void {
    if (leased === slots && this.held < this.capacity) this.refillWhenFlushed = true;
  }

  /** Whether a claim was owed once the write queue flushed; asking clears it. */
  takeRefill(): boolean {
    if (!this.refillWhenFlushed) return false;
    this.refillWhenFlushed = false;
    return true;
  }

  /** An ACK of this delivery came on this connection; its answer is on the way. */
  acking(deliveryId: string): void {
    this.unanswered.add(deliveryId);
  }

  /** An ACK answered DELIVERY_LEASE_LOST: that proof is dead, the client holds nothing. */
  lost(deliveryId: string): void {
    this.unanswered.delete(deliveryId);
    this.outstanding.delete(deliveryId);
  }

  /**
   * An ACK answered with its receipt. Returns whether a claim is worth asking for now:
   * refills come in batches, since a claim per freed slot would cost one claim
   * transaction per delivery (new results still wake the session at once). Only a
   * delivery this session sent frees one of its slots: a client may ACK another
   * connection's delivery, or an earlier connection's, on this one.
   */
  acked(deliveryId: string, deduplicated: boolean): boolean {
    this.unanswered.delete(deliveryId);
    if (!deduplicated) return this.outstanding.delete(deliveryId) && this.freed();
    // A replay of an ACK that another node's connection took: nothing told this session.
    return this.ackedElsewhere(deliveryId);
  }

  /**
   * Another connection of this node ACKed a delivery (a client may ACK with any of its
   * connections): when this session sent it, its slot is free now, not at lease_until.
   * Returns whether a claim is worth asking for now.
   */
  ackedElsewhere(deliveryId: string): boolean {
    return this.forget(deliveryId, Date.now()) && this.freed();
  }

  /**
   * Before a read of the deliveries LEASED to this session: a mark of what it has sent so
   * far, or undefined when the client holds none of them by its own count.
   */
  leaseCheck(): number | undefined {
    return this.room() < this.capacity ? this.sends : undefined;
  }

  /**
   * That read's answer. A delivery sent before the mark that is not LEASED to this session,
   * with no ACK of it unanswered here, was ACKed on another connection (perhaps another
   * node's) or recovered: its slot is free. Returns whether any was freed.
   */
  leasedNow(leased: ReadonlySet<string>, mark: number): boolean {
    let freed = false;
    const now = Date.now();
    for (const [id, { n }] of this.outstanding) {
      if (n > mark || leased.has(id) || this.unanswered.has(id)) continue;
      if (this.forget(id, now)) this.held = Math.max(0, this.held - 1);
      freed = true;
    }
    return freed;
  }

  /**
   * The client no longer holds a delivery this session sent (ACKed elsewhere, or its lease
   * recovered). Returns whether it is still in the held count the claims read: a lease that
   * ran out is not.
   */
  private forget(deliveryId: string, now: number): boolean {
    const until = this.outstanding.get(deliveryId)?.until;
    this.outstanding.delete(deliveryId);
    return until !== undefined && until > now;
  }

  /** One held delivery fewer: whether a claim is worth asking for now (refills come in batches). */
  private freed(): boolean {
    this.held = Math.max(0, this.held - 1);
    return this.capacity - this.held >= Math.min(REFILL_BATCH, Math.ceil(this.capacity / 2));
  }
}

// The automatic consumer: handler(event, delivery) runs for every delivery and
// resolves only once the receiver has durably saved the result; then — and never
// before — the consumer ACKs. It reconnects after any close (exponential back-off with
// jitter), keeps every proof whose ACK was not confirmed and re-sends those ACKs on the
// next connection (a handler that outlives its connection is ACKed on the one open when
// it resolves; at stop, those still unconfirmed are handed back by unconfirmedProofs() for
// the application to save and give the next consumer as `proofs`, protocol §7), runs at most
// `capacity` handlers at once, drops (and reports) a proof that was replaced
// (DELIVERY_LEASE_LOST: the redelivery will come), and stops and reports on
// EVENT_HISTORY_EXPIRED, PERMISSION_DENIED, NOT_FOUND or UNAUTHENTICATED instead of
// looping. It keeps no in-memory "seen" set: delivery is at least once, so the receiver
// dedupes by event.id in its own durable store (see examples/inbox).
import { requireSafeTransport } from "./transport.js";
import { EventConnection, OrbitEventError, type AckReceipt, type Delivery, type Proof } from "./event-connection.js";
import { Backoff } from "./backoff.js";
import type { EventDelivery, ResultEvent } from "./types.js";

/** The close handshake of stop() waits at least this long before dropping the socket. */
const CLOSE_AT_LEAST_MS = 1000;

export interface ConsumerOptions {
  /** A node, or several: after a failed or closed connection the next one is tried. */
  readonly baseUrl: string | readonly string[];
  /** Send the token over plain http:// (ws://) to a host that is not loopback (default false: refused). */
  readonly allowInsecure?: boolean;
  readonly token: string;
  readonly subscriptionId: string;
  /** 1-32 (default 8). */
  readonly capacity?: number;
  /** Resolve only after the result is durably saved; a rejection leaves it un-ACKed (it is redelivered). */
  readonly handler: (event: ResultEvent, delivery: EventDelivery) => Promise<void>;
  /** false: never ACK (a read-only tail; deliveries come back when their leases run out). */
  readonly ack?: boolean;
  /** Called for every problem that does not stop the consumer (handler failures, closes). */
  readonly onError?: (e: unknown) => void;
  /**
   * Called with each ACK receipt the node answered: that ACK is durable, and its delivery
   * will not come again (a receipt of a re-sent proof says `deduplicated`).
   */
  readonly onAck?: (receipt: AckReceipt) => void;
  readonly backoff?: { readonly initialMs?: number; readonly maxMs?: number };
  /**
   * Proofs whose ACK an earlier consumer of this subscription could not confirm, as its
   * unconfirmedProofs() handed them over at stop and the application saved them
   * (docs/protocol.md §7): ACKed on the first connection, so a result already saved is
   * confirmed at once instead of being delivered again when its lease runs out (an attempt
   * of its budget spent).
   */
  readonly proofs?: readonly Proof[];
}

/** The shapes events.schema.json gives a proof's fields (a malformed one could never ACK). */
const PROOF_ID = /^[0-9a-f]{32}$/;
const PROOF_EPOCH = /^(?:0|[1-9][0-9]{0,19})$/;
const PROOF_SECRET = /^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$/;

export interface StopOptions {
  /**
   * How long running handlers and the unconfirmed ACKs get (default 10000 ms). A handler
   * still running then is not waited for: its proof, if it resolves later, is only in
   * unconfirmedProofs() (saveProofs has been called); unsaved, its delivery comes again.
   */
  readonly deadlineMs?: number;
  /**
   * Saves the proofs whose ACK is still unconfirmed, durably, with the application's
   * results (docs/protocol.md §7); called once, after the drain and before the close, also
   * with none, and given what is left of the deadline, at least 1 s. Give them to the next
   * Consumer as `proofs`.
   */
  readonly saveProofs?: (proofs: Proof[]) => Promise<void>;
}

/** Why the consumer ended: stop() was called, or a code it must not retry. */
export type StopReason = { readonly stopped: true } | { readonly stopped: false; readonly error: OrbitEventError };

const FATAL = new Set<string>(["EVENT_HISTORY_EXPIRED", "PERMISSION_DENIED", "NOT_FOUND", "UNAUTHENTICATED"]);

export class Consumer {
  /** Proofs whose ACK was not confirmed yet, by delivery id (the newest lease's proof wins, see keep). */
  private readonly unconfirmed = new Map<string, Proof>();
  private readonly running = new Set<Promise<void>>();
  /** Deliveries of the open connection that wait for a free handler (see pump). */
  private waiting: Delivery[] = [];
  private readonly capacity: number;
  private conn: EventConnection | undefined;
  private draining = false;
  private ended = false;
  private wake: (() => void) | undefined;
  /** Aborts the connection being opened when stop() comes (EventConnection.open's signal). */
  private readonly stopping = new AbortController();
  /** When stop()'s deadline runs out; a connection opened after stop() closes by then. */
  private stopBy = 0;
  readonly done: Promise<StopReason>;
  private finish!: (r: StopReason) => void;
  private started = false;
  // A #private field: util.inspect (a logged consumer, a REPL) shows TypeScript's private
  // fields, and these options hold the bearer token.
  readonly #o: ConsumerOptions;

  constructor(o: ConsumerOptions) {
    this.#o = o;
    this.done = new Promise((resolve) => (this.finish = resolve));
    this.capacity = o.capacity ?? 8;
    // A hello the contract refuses would never connect: say so now, not by retrying forever.
    if (!Number.isInteger(this.capacity) || this.capacity < 1 || this.capacity > 32)
      throw new RangeError(`capacity must be an integer 1-32, not ${this.capacity}`);
    if (!/^[0-9a-f]{32}$/.test(o.subscriptionId))
      throw new RangeError("subscriptionId must be 32 lowercase hex characters");
    for (const url of typeof o.baseUrl === "string" ? [o.baseUrl] : o.baseUrl)
      requireSafeTransport(url, o.allowInsecure);
    for (const p of o.proofs ?? []) {
      if (
        !PROOF_ID.test(p.delivery_id) ||
        !PROOF_EPOCH.test(p.epoch) ||
        BigInt(p.epoch) >= 2n ** 64n ||
        !PROOF_SECRET.test(p.lease_secret)
      ) {
        throw new RangeError("proofs must be {delivery_id, epoch, lease_secret} as event.deliver gave them");
      }
      this.unconfirmed.set(p.delivery_id, p);
    }
  }

  /** Starts the connect / consume / reconnect loop; `done` settles when it ends. */
  start(): this {
    if (this.started || this.draining) return this;
    this.started = true;
    void this.loop();
    return this;
  }

  get pendingAcks(): number {
    return this.unconfirmed.size;
  }

  /**
   * The proofs whose ACK was not confirmed (yet): after stop(), those its deadline left
   * unconfirmed. docs/protocol.md §7: a client closing keeps them — save them with the results, and
   * give them to the next consumer (`proofs`); a replay of an ACK that did land answers
   * deduplicated, one a newer lease replaced is dropped.
   */
  unconfirmedProofs(): Proof[] {
    return [...this.unconfirmed.values()];
  }

  private async loop(): Promise<void> {
    const backoff = new Backoff(this.#o.backoff?.initialMs, this.#o.backoff?.maxMs);
    let notBefore = 0;
    const urls = typeof this.#o.baseUrl === "string" ? [this.#o.baseUrl] : this.#o.baseUrl;
    for (let attempt = 0; !this.draining; attempt++) {
      try {
        const conn = await EventConnection.open({
          baseUrl: urls[attempt % urls.length]!,
          token: this.#o.token,
          subscriptionId: this.#o.subscriptionId,
          capacity: this.capacity,
          signal: this.stopping.signal,
          ...(this.#o.allowInsecure !== undefined ? { allowInsecure: this.#o.allowInsecure } : {}),
        });
        this.conn = conn;
        if (this.draining) {
          // stop() came as the welcome arrived: it found no connection to close. The close
          // handshake gets what is left of stop()'s deadline (a node that never answers
          // the close frame would hold stop() for ws's 30 s closing timeout).
          await conn.close(1000, "consumer stopping", Math.max(CLOSE_AT_LEAST_MS, this.stopBy - Date.now()));
          break;
        }
        // The back-off starts again only after a connection that did its work: one a node
        // closes right after its welcome (failing database, 1011/1013) would reconnect at once,
        // and in a loop, if every welcome reset it.
        let useful = false;
        conn.on("delivery", (d: Delivery) => {
          useful = true;
          this.onDelivery(d);
        });
        const healthy = setTimeout(() => (useful = true), conn.welcome.heartbeat_interval_ms);
        await this.resendAcks();
        const closed = await conn.closed;
        clearTimeout(healthy);
        if (useful) backoff.reset();
        this.waiting = []; // not taken: their leases run out and they are delivered again
        if (closed.error) this.report(closed.error);
        if (closed.error && FATAL.has(closed.error.code)) return this.end({ stopped: false, error: closed.error });
      } catch (e) {
        if (this.draining) break; // stop() gave up the connection being opened: not a failure
        if (e instanceof OrbitEventError && FATAL.has(e.code)) return this.end({ stopped: false, error: e });
        this.report(e);
        // A full node (429) or one shutting down (503) says when to come back.
        if (e instanceof OrbitEventError && e.retryAfterMs !== undefined) notBefore = e.retryAfterMs;
      }
      if (this.draining) break;
      await this.sleep(backoff.next(notBefore));
      notBefore = 0;
    }
    this.end({ stopped: true });
  }

  private onDelivery(d: Delivery): void {
    if (this.draining) return; // not taken: its lease runs out and it is delivered again
    this.waiting.push(d);
    this.pump();
  }

  // At most `capacity` handlers run at once, also across a reconnect: the new connection
  // may be handed `capacity` deliveries while handlers of the closed one still run.
  private pump(): void {
    while (!this.draining && this.running.size < this.capacity && this.waiting.length > 0)
      this.run(this.waiting.shift()!);
  }

  private run(d: Delivery): void {
    // A handler that throws instead of rejecting fails the same way: no ACK, and no throw
    // into the socket's message callback, where it would take the whole process down.
    const p = new Promise<void>((resolve) => resolve(this.#o.handler(d.event, d.delivery)))
      .then(() => {
        if (this.#o.ack === false || !this.keep(d.proof)) return;
        return this.sendAck(d.proof);
      })
      .catch((e: unknown) => this.report(e));
    this.running.add(p);
    void p.finally(() => {
      this.running.delete(p);
      this.pump();
    });
  }

  // On the connection open now, not the one that delivered: a proof ACKs on any
  // connection (docs/protocol.md §5), and a handler may outlive its connection. With none open the
  // proof waits in `unconfirmed` for resendAcks on the next one.
  private async sendAck(proof: Proof): Promise<void> {
    const conn = this.conn;
    if (!conn?.isOpen) return;
    try {
      const receipt = await conn.ack(proof);
      this.forget(proof);
      this.#o.onAck?.(receipt);
    } catch (e) {
      if (e instanceof OrbitEventError && e.code === "DELIVERY_LEASE_LOST") {
        // Replaced by a newer lease: the redelivery carries the new proof. Reported all the
        // same: a handler slower than the lease spends an attempt of the budget each time.
        this.forget(proof);
        this.report(e);
        return;
      }
      // The answer was lost (closed connection): the proof stays for the next connection.
      this.report(e);
    }
  }

  /**
   * Keeps a proof until its ACK is confirmed, unless a newer lease's proof of the same
   * delivery is kept: a handler that outlived its lease may finish after the redelivery's,
   * and its proof — replaced, DELIVERY_LEASE_LOST — must not overwrite the one that ACKs.
   */
  private keep(proof: Proof): boolean {
    const kept = this.unconfirmed.get(proof.delivery_id);
    if (kept && BigInt(kept.epoch) > BigInt(proof.epoch)) return false;
    this.unconfirmed.set(proof.delivery_id, proof);
    return true;
  }

  private forget(proof: Proof): void {
    const kept = this.unconfirmed.get(proof.delivery_id);
    if (kept && kept.epoch === proof.epoch && kept.lease_secret === proof.lease_secret)
      this.unconfirmed.delete(proof.delivery_id);
  }

  private async resendAcks(): Promise<void> {
    await Promise.all([...this.unconfirmed.values()].map((p) => this.sendAck(p)));
  }

  /**
   * A bounded drain: take no new deliveries, let running handlers finish (at most
   * deadlineMs), send their ACKs, give the proofs still unconfirmed to `saveProofs`, then
   * close. docs/protocol.md §7: a client first finishes its own local persistence and saves
   * the proofs of unconfirmed ACKs, then closes the connection — the save comes before the
   * close, and its failure is stop()'s rejection, after the close.
   */
  async stop(o: StopOptions = {}): Promise<StopReason> {
    this.draining = true;
    if (!this.started) this.end({ stopped: true }); // no loop ever ran to settle `done`
    this.waiting = [];
    const deadlineMs = o.deadlineMs ?? 10_000;
    const until = Date.now() + deadlineMs;
    this.stopBy = until;
    this.stopping.abort(); // a connection still being opened is given up
    const deadline = new Promise<void>((r) => setTimeout(r, deadlineMs).unref());
    await Promise.race([Promise.all([...this.running]), deadline]);
    const conn = this.conn;
    if (conn?.isOpen && this.unconfirmed.size > 0) await Promise.race([this.resendAcks(), deadline]);
    // The application's save, before the close: closing first would leave the proofs only
    // in memory once the connection is gone (a crash would lose them). Bounded like the close
    // handshake (what is left of the deadline, at least 1 s): a save that hangs must not
    // hold stop() for ever; the proofs stay in unconfirmedProofs().
    let saveFailed = false;
    let saveError: unknown;
    if (o.saveProofs) {
      const budgetMs = Math.max(CLOSE_AT_LEAST_MS, until - Date.now());
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`saveProofs did not finish within ${budgetMs} ms`)), budgetMs);
      });
      try {
        await Promise.race([o.saveProofs(this.unconfirmedProofs()), late]);
      } catch (e) {
        saveFailed = true;
        saveError = e;
      } finally {
        clearTimeout(timer);
      }
    }
    // The close handshake gets what is left of the deadline, and at least 1 s: a node that
    // never answers the close frame would hold stop() for ws's 30 s closing timeout.
    await conn?.close(1000, "consumer stopping", Math.max(CLOSE_AT_LEAST_MS, until - Date.now()));
    this.wake?.();
    if (saveFailed) throw saveError;
    return this.done;
  }

  private report(e: unknown): void {
    this.#o.onError?.(e);
  }

  private end(r: StopReason): void {
    if (this.ended) return;
    this.ended = true;
    this.finish(r);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(t);
        resolve();
      };
    });
  }
}

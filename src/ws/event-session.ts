// One event session on the node (docs/protocol.md §5-7): hello → welcome binds the
// connection to a subscription with a server-generated session_id; then deliveries flow
// out (each lease durable before its frame), and pings and ACKs flow in. This file holds
// the protocol and the session's life; the rest is in files of their own: flow control
// (flow.ts), what the session may hold (seat.ts), its row in the database
// (session-record.ts), its deadlines (session-timers.ts), and the claims (claims.ts).
import type WebSocket from "ws";
import { heartbeatIntervalMs } from "../config/limits.js";
import { PingChecks } from "./ping-checks.js";
import type { Pool } from "../db/types.js";
import { isUnavailableError } from "../db/tx.js";
import type { AckOutcome } from "../domain/delivery-acks.js";
import type { SeatOutcome } from "../domain/delivery-engine.js";
import { consumableSubscription, pingRead, type SubscriptionRow } from "../domain/event-sessions.js";
import { newId, type Caller } from "../domain/identity.js";
import { describeError, type Logger } from "../log/index.js";
import { decodeBase64urlCanonical } from "../wire/base64url.js";
import { OrbitError, type ErrorCode } from "../wire/errors.js";
import { formatTimestamp } from "../wire/time.js";
import type { AckBatcher } from "./ack-batcher.js";
import type { Claimant, ClaimScheduler } from "./claim-scheduler.js";
import type { ClaimingSession } from "./claims.js";
import { CLOSE, closeCodeFor } from "./close-codes.js";
import { FrameFlow, type FlowOwner } from "./flow.js";
import {
  ackFrame,
  ackReceiptText,
  deliverFrameText,
  errorFrame,
  helloSubscriptionId,
  isAck,
  isHello,
  isPing,
  parseClientFrame,
  welcomeFrame,
  type ParsedFrame,
} from "./frames.js";
import { Seat, type ReadySeat } from "./seat.js";
import { SessionRecord } from "./session-record.js";
import { SessionTimers } from "./session-timers.js";
import type { EventAck, EventsHello, EventsPing } from "../../generated/ws/frames.js";
import * as metrics from "../metrics.js";

export interface SessionDeps {
  readonly pool: Pool;
  readonly scheduler: ClaimScheduler<EventSession>;
  readonly acks: AckBatcher;
  readonly log: Logger;
  readonly nodeId: string;
  readonly leaseDurationMs: number;
  readonly helloTimeoutMs: number;
  readonly idleTimeoutMs: number;
  /** How often a bound session claims even without a trigger (recovers expired leases). */
  readonly recheckMs: number;
  onBound(s: EventSession): void;
  onClosed(s: EventSession): void;
  /** This session's client ACKed a delivery (not a replay): another session may have sent it. */
  onAcked(s: EventSession, deliveryId: string): void;
}

type State = "awaiting-hello" | "binding" | "bound" | "closed";

export class EventSession implements Claimant, ClaimingSession, FlowOwner {
  private state: State = "awaiting-hello";
  sessionId = "";
  subscriptionId = "";
  readonly namespaceId: string;
  readonly applicationId: string;
  private readonly flow: FrameFlow;
  private readonly seat = new Seat();
  private readonly record: SessionRecord;
  private readonly timers: SessionTimers;
  /** The write timeout cut the socket. */
  private terminated = false;
  private readonly pingChecks = new PingChecks();

  constructor(
    private readonly ws: WebSocket,
    private readonly caller: Caller,
    private readonly authorization: string,
    private readonly deps: SessionDeps,
  ) {
    this.namespaceId = caller.namespaceId;
    this.applicationId = caller.applicationId;
    this.flow = new FrameFlow(ws, this);
    this.record = new SessionRecord(deps.pool, deps.log);
    this.timers = new SessionTimers((reason) => this.close(CLOSE.policy, reason), deps.idleTimeoutMs);
    this.timers.awaitHello(deps.helloTimeoutMs);
    ws.on("message", (data, isBinary) => this.onMessage(data as Buffer, isBinary));
    ws.on("close", () => this.cleanup());
    ws.on("error", (e) => deps.log.log("warn", "websocket error", describeError(e)));
  }

  get isBound(): boolean {
    return this.state === "bound";
  }

  get closed(): boolean {
    return this.state === "closed";
  }

  /** Settles when the session's close is recorded (shutdown waits for it). */
  get sessionClosed(): Promise<void> {
    return this.record.closed;
  }

  private onMessage(data: Buffer, isBinary: boolean): void {
    if (this.state === "closed") return;
    if (isBinary) return this.close(CLOSE.policy, "binary frames are not accepted");
    this.flow.receive(data);
  }

  async handle(text: string): Promise<void> {
    const parsed = parseClientFrame(text);
    if (parsed.kind === "envelope-error") return this.close(CLOSE.policy, `invalid envelope: ${parsed.reason}`);
    if (parsed.kind === "body-error") {
      // An invalid hello body gets an error frame, then 1008 (docs/protocol.md §5).
      if (parsed.type === "events.hello" && this.state === "awaiting-hello") return this.refuseHello(parsed);
      if (parsed.type === "events.hello" || !this.isBound || parsed.sessionId !== this.sessionId) {
        return this.close(CLOSE.policy, "invalid envelope");
      }
      this.send(errorFrame("INVALID_ARGUMENT", parsed.reason, parsed.messageId, this.sessionId));
      return;
    }
    const f = parsed.frame;
    if (isHello(f)) {
      // A second hello on a bound connection is an invalid envelope (docs/protocol.md §5).
      if (this.state !== "awaiting-hello") return this.close(CLOSE.policy, "hello was already sent");
      return this.hello(f);
    }
    if (!this.isBound || f.session_id !== this.sessionId) return this.close(CLOSE.policy, "wrong session");
    this.timers.touch();
    if (isPing(f)) return this.ping(f);
    if (isAck(f)) return this.ack(f);
  }

  /**
   * An invalid hello body is INVALID_ARGUMENT, unless it names, well-formed, a subscription
   * outside the caller's scope: scope (404) comes before the body (400) (docs/protocol.md §1).
   */
  private async refuseHello(parsed: Extract<ParsedFrame, { kind: "body-error" }>): Promise<void> {
    const id = helloSubscriptionId(parsed.body);
    if (id !== undefined && !(await this.helloTarget(id, parsed.messageId))) return;
    this.closeWithError("INVALID_ARGUMENT", parsed.reason, parsed.messageId);
  }

  /**
   * The hello's subscription if the caller may bind to it; otherwise the connection is
   * closed (NOT_FOUND, or the database's failure) and the answer is undefined.
   */
  private async helloTarget(subscriptionId: string, messageId: string): Promise<SubscriptionRow | undefined> {
    this.state = "binding";
    // The hello deadline (docs/protocol.md §5) is on the client's hello, not on our
    // binding: a hello that came in time is never closed as late because its lookups or
    // session insert were slow. From here the idle clock bounds the binding.
    this.timers.helloCame();
    this.timers.touch();
    // The credential as it is now, not as the upgrade found it: one revoked (or cut down)
    // since gets its error here, not a welcome and a session first.
    try {
      const sub = await consumableSubscription(this.deps.pool, this.authorization, subscriptionId);
      return this.state === "binding" ? sub : undefined;
    } catch (e) {
      if (this.state !== "binding") return undefined;
      if (e instanceof OrbitError) this.closeWithError(e.code, e.message, messageId);
      else this.dbFailure(e, messageId);
      return undefined;
    }
  }

  private async hello(f: EventsHello): Promise<void> {
    const s = await this.helloTarget(f.body.subscription_id, f.message_id);
    if (!s) return;
    const sessionId = newId();
    // A client that leaves while its session is being written: cleanup records the close
    // after the insert, so the row never stays open.
    const inserted = this.record.open({
      id: sessionId,
      subscriptionId: s.id,
      credentialId: this.caller.credentialId,
      capacity: f.body.capacity,
      nodeId: this.deps.nodeId,
    });
    try {
      await inserted;
    } catch (e) {
      return this.dbFailure(e, f.message_id);
    } finally {
      this.record.settled();
    }
    if (this.state !== "binding") return;
    this.sessionId = sessionId;
    this.subscriptionId = s.id;
    this.seat.bind(f.body.capacity, Boolean(s.enabled));
    this.state = "bound";
    this.send(
      welcomeFrame(f.message_id, {
        session_id: sessionId,
        subscription_id: s.id,
        capacity: f.body.capacity,
        lease_duration_ms: this.deps.leaseDurationMs,
        heartbeat_interval_ms: heartbeatIntervalMs(this.deps.idleTimeoutMs),
        server_time: formatTimestamp(new Date()),
        enabled: Boolean(s.enabled),
      }),
    );
    this.timers.touch();
    this.timers.recheckEvery(this.deps.recheckMs, () => this.deps.scheduler.request(this));
    this.deps.onBound(this);
    this.deps.scheduler.request(this);
  }

  /** Re-checks credential and scope (docs/protocol.md §7) as PingChecks allows, else answers from the last. */
  private async ping(f: EventsPing): Promise<void> {
    let check = this.pingChecks.recent();
    let freed = false;
    if (!check) {
      // The check also reads the session's leases, to learn of ACKs taken on another node.
      const mark = this.seat.leaseCheck();
      try {
        const session = mark === undefined ? undefined : this.sessionId;
        const read = await pingRead(this.deps.pool, this.authorization, this.subscriptionId, session);
        check = { enabled: read.enabled, backlog: read.backlog };
        if (read.leased && mark !== undefined) freed = this.seat.leasedNow(read.leased, mark);
      } catch (e) {
        if (e instanceof OrbitError) return this.closeWithError(e.code, e.message, f.message_id);
        return this.dbFailure(e, f.message_id);
      }
      this.pingChecks.checked(check);
    }
    const { enabled, backlog } = check;
    this.send(ackFrame(f.message_id, this.sessionId, { server_time: formatTimestamp(new Date()), enabled }));
    // The ping reply is how a session hears of a resume, a `:retry` or an ACK served by
    // another node (there is no cross-node signal): claim when a slot was freed, when the
    // subscription was paused here, or when its backlog (PENDING + LEASED + EXPIRED) holds
    // more than this session's own leases. An idle subscription claims only at its recheck.
    if (enabled && (freed || this.seat.behind(backlog))) this.wake();
  }

  private async ack(f: EventAck): Promise<void> {
    let secret: Buffer;
    try {
      secret = decodeBase64urlCanonical(f.body.lease_secret, 32);
    } catch {
      this.send(
        errorFrame(
          "INVALID_ARGUMENT",
          "lease_secret is not canonical base64url of 32 bytes",
          f.message_id,
          this.sessionId,
        ),
      );
      return;
    }
    this.seat.acking(f.body.delivery_id);
    const who = {
      subscriptionId: this.subscriptionId,
      namespaceId: this.namespaceId,
      credentialId: this.caller.credentialId,
    };
    // The answer comes after the batch's commit; the frame's read slot need not wait for it
    // (FrameFlow.awaitCommit).
    const answered = this.deps.acks
      .submit(who, { deliveryId: f.body.delivery_id, epoch: f.body.epoch, secret })
      .then(
        (outcome) => this.answerAck(f, outcome),
        (e: unknown) =>
          e instanceof OrbitError && e.code !== "UNAVAILABLE"
            ? this.closeWithError(e.code, e.message, f.message_id)
            : void this.dbFailure(e, f.message_id),
      )
      .catch((e: unknown) => this.fail(e));
    await this.flow.awaitCommit(answered);
  }

  private answerAck(f: EventAck, outcome: AckOutcome): void {
    metrics.ackOutcomes.inc({ outcome: !outcome.ok ? "lease_lost" : outcome.deduplicated ? "deduplicated" : "acked" });
    if (!outcome.ok) {
      this.send(
        errorFrame(
          "DELIVERY_LEASE_LOST",
          "the proof was replaced by a newer lease or is not valid",
          f.message_id,
          this.sessionId,
        ),
      );
      this.seat.lost(f.body.delivery_id);
      return;
    }
    this.send(
      ackReceiptText(f.message_id, this.sessionId, {
        delivery_id: outcome.deliveryId,
        event_id: outcome.eventId,
        epoch: outcome.epoch,
        acknowledged_at: outcome.acknowledgedAt,
        deduplicated: outcome.deduplicated,
      }),
    );
    if (this.seat.acked(outcome.deliveryId, outcome.deduplicated)) this.requestClaim();
    if (!outcome.deduplicated) this.deps.onAcked(this, outcome.deliveryId);
  }

  /** A delivery was ACKed on another connection of this node: free its slot if it was ours. */
  ackedElsewhere(deliveryId: string): void {
    if (this.seat.ackedElsewhere(deliveryId)) this.requestClaim();
  }

  /**
   * The subscription may have become claimable (resumed, a delivery retried): claim even
   * if the last claim found it paused — that claim will tell again if it still is.
   */
  wake(): void {
    this.seat.unpause();
    this.requestClaim();
  }

  /** Asks the scheduler for a claim if this session could take a delivery now (Seat.wantsClaim). */
  requestClaim(): void {
    if (this.isBound && this.seat.wantsClaim()) this.deps.scheduler.request(this);
  }

  claimSeat(): ReadySeat | undefined {
    return this.isBound ? this.seat.claimSeat(this.sessionId, this.flow.unflushed) : undefined;
  }

  claimed(paused: boolean, out: SeatOutcome, slots: number): void {
    this.seat.claimed(paused, out.held);
    for (const l of out.leases) {
      this.seat.sent(l.delivery.id, Date.parse(l.delivery.lease_until!));
      this.send(deliverFrameText(this.sessionId, l.delivery, l.eventJson, l.leaseSecret));
    }
    this.seat.refillIfFull(out.leases.length, slots);
  }

  claimFailed(e: unknown): void {
    if (e instanceof OrbitError) return this.closeWithError(e.code, e.message);
    this.dbFailure(e);
  }

  private send(frame: object | string): void {
    this.flow.send(frame);
  }

  flushed(): void {
    if (this.seat.takeRefill()) this.requestClaim();
  }

  writeTimedOut(): void {
    this.terminate("write timeout");
  }

  private closeWithError(code: ErrorCode, message: string, replyTo?: string): void {
    this.send(errorFrame(code, message, replyTo, this.isBound ? this.sessionId : undefined));
    this.close(closeCodeFor(code), code);
  }

  private dbFailure(e: unknown, replyTo?: string): never | undefined {
    if (isUnavailableError(e) || (e instanceof OrbitError && e.code === "UNAVAILABLE")) {
      this.closeWithError("UNAVAILABLE", "the database is not available; reconnect", replyTo);
    } else {
      this.deps.log.log("error", "event connection failure", describeError(e));
      this.closeWithError("INTERNAL", "internal error", replyTo);
    }
    return undefined;
  }

  fail(e: unknown): void {
    this.dbFailure(e);
  }

  close(code: number, reason: string): void {
    if (this.state === "closed") return;
    this.cleanup();
    // Reading may be paused (read or write queue full): resume it, or the client's close
    // reply is never read and the socket lingers until ws's closing timeout.
    if (this.ws.isPaused) this.ws.resume();
    this.ws.close(code, reason.slice(0, 120));
  }

  private terminate(reason: string): void {
    // Every unflushed frame has its own write timer, and they run out together: the
    // first one cuts the connection, the rest find it cut (one log line, not one each).
    if (this.terminated) return;
    this.terminated = true;
    this.deps.log.log("warn", "event connection terminated", { reason, session_id: this.sessionId || undefined });
    this.cleanup();
    this.ws.terminate();
  }

  /** Idempotent: timers off, out of the scheduler; leases stay in the database. */
  private cleanup(): void {
    if (this.state === "closed") return;
    const wasBound = this.isBound;
    this.state = "closed";
    this.timers.stop();
    this.deps.scheduler.remove(this);
    this.record.close(wasBound ? this.sessionId : undefined);
    this.deps.onClosed(this);
  }
}

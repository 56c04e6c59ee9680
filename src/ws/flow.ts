// Flow control of one event session, both ways (docs/protocol.md §5): at most
// READ_QUEUE_PER_CONNECTION client frames in processing — reading from the socket pauses
// there, and the rest of a chunk ws has already read waits its turn — and at most
// WRITE_QUEUE_PER_CONNECTION frames written but not flushed, beyond which no client frame
// starts; a write that does not flush within WRITE_TIMEOUT_MS ends the session.
import type WebSocket from "ws";
import {
  MAX_CAPACITY,
  READ_QUEUE_PER_CONNECTION,
  WRITE_QUEUE_PER_CONNECTION,
  WRITE_TIMEOUT_MS,
} from "../config/limits.js";
import { corkForTurn } from "../wire/cork.js";

/**
 * ACKs of one session that may wait for their batch's commit without holding a read
 * slot: the most deliveries a session can hold, so a consumer ACKing all it holds at
 * once is never held back; replays and invalid proofs beyond it wait in the read queue.
 */
const ACKS_AWAITING_COMMIT = MAX_CAPACITY;

/** What the flow asks of the session it serves. */
export interface FlowOwner {
  /** The session is closed: nothing more is started or written. */
  readonly closed: boolean;
  /** Processes one client frame; a rejection goes to fail. */
  handle(text: string): Promise<void>;
  fail(e: unknown): void;
  /** Every frame written so far has flushed. */
  flushed(): void;
  /** A write did not flush in time. */
  writeTimedOut(): void;
}

export class FrameFlow {
  /** Client frames in processing (the read queue). */
  private processing = 0;
  /** Frames written and not yet flushed (the write queue). */
  private pendingWrites = 0;
  /** Frames read beyond the read queue (the rest of a chunk already read), in order. */
  private readonly waitingFrames: Buffer[] = [];
  /** ACKs processed whose answer waits for their batch's commit. */
  private acksAwaitingCommit = 0;

  constructor(
    private readonly ws: WebSocket,
    private readonly owner: FlowOwner,
  ) {}

  /** Frames written and not yet flushed. */
  get unflushed(): number {
    return this.pendingWrites;
  }

  /** A text frame read from the socket: started now, or queued in order. */
  receive(data: Buffer): void {
    if (!this.canStart()) {
      // ws hands over every frame of a chunk it has read, also past a pause: these wait
      // here, in order, and start as frames in processing finish and writes flush.
      this.waitingFrames.push(data);
      this.ws.pause();
      return;
    }
    this.process(data);
  }

  /**
   * A frame starts while the read queue has a free slot and the write queue is not full:
   * every frame may be answered, so a client that sends and never reads would otherwise
   * pile up replies in the node's memory without bound until the write timeout, and slow
   * every other client of the node. Reading pauses until both have room.
   */
  private canStart(): boolean {
    return this.processing < READ_QUEUE_PER_CONNECTION && this.pendingWrites < WRITE_QUEUE_PER_CONNECTION;
  }

  private process(data: Buffer): void {
    this.processing++;
    if (!this.canStart()) this.ws.pause();
    this.owner
      .handle(data.toString("utf8"))
      .catch((e: unknown) => this.owner.fail(e))
      .finally(() => {
        this.processing--;
        this.pump();
      });
  }

  /** Starts the waiting frames there is room for; resumes reading once none wait. */
  private pump(): void {
    if (this.owner.closed) return void (this.waitingFrames.length = 0);
    while (this.waitingFrames.length > 0 && this.canStart()) this.process(this.waitingFrames.shift()!);
    if (this.ws.isPaused && this.waitingFrames.length === 0 && this.canStart()) this.ws.resume();
  }

  /**
   * An ACK's frame is processed once the ACK waits in the batcher for its batch's commit:
   * its read slot goes to the next frame, so the ACKs a consumer sends together commit
   * together (the answer is still sent only after the commit). Bounded: beyond
   * ACKS_AWAITING_COMMIT, a frame keeps its slot until `answered` settles.
   */
  async awaitCommit(answered: Promise<void>): Promise<void> {
    this.acksAwaitingCommit++;
    const done = answered.finally(() => this.acksAwaitingCommit--);
    if (this.acksAwaitingCommit > ACKS_AWAITING_COMMIT) await done;
  }

  /**
   * The write queue bounds deliveries: a claim leases at most the free slots, so deliver
   * frames never pile up. It bounds replies too: no frame of the client starts while the
   * queue is full (canStart), so beyond it only the replies of frames already in
   * processing (and of ACKs waiting for their commit) are queued. A consumer that stops
   * reading is cut by the write timeout. The frames of one turn — a claim's deliveries, an
   * ACK batch's replies — leave in one write (corkForTurn), so that a session's writes
   * finish together and its next claim comes fuller.
   */
  send(frame: object | string): void {
    if (this.owner.closed || this.ws.readyState !== this.ws.OPEN) return;
    corkForTurn(this.ws);
    this.pendingWrites++;
    const timer = setTimeout(() => this.owner.writeTimedOut(), WRITE_TIMEOUT_MS);
    if (this.pendingWrites >= WRITE_QUEUE_PER_CONNECTION) this.ws.pause();
    this.ws.send(typeof frame === "string" ? frame : JSON.stringify(frame), () => {
      clearTimeout(timer);
      this.pendingWrites--;
      this.pump();
      if (this.pendingWrites === 0) this.owner.flushed();
    });
  }
}

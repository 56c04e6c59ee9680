// Group commit for workers' calls (complete, requeue, and the items of a batch
// completion): a call that arrives while the node's batches are in flight waits for one
// to finish and then goes with every other call waiting, in one transaction of 2 round
// trips whatever its size (worker.ts, endAttemptCalls). A call that finds the node idle
// goes at once, alone: batching adds no wait, it only forms under load. Each answer is
// sent after its batch committed.
//
// Why: a completion alone is one HTTP request and one durable transaction of 2 round
// trips; on 2 cores the round trips and commits, not the statements, are the cost
// (bench/README.md). Batched, N completions share the round trips and the commit.
import type { Pool } from "../db/types.js";
import { translateDbError, withTransaction } from "../db/tx.js";
import { attemptBatchSize, attemptCallsWaiting } from "../metrics.js";
import { unavailable } from "../wire/errors.js";
import { toWireTask, type TaskWire } from "./task-state.js";
import { endAttemptCalls, type AttemptCallInput, type AttemptCallOutcome } from "./worker.js";

/**
 * Batches in flight at once: while one commits, the next gathers. 2 suits orbit.append's
 * 16 workers best (bench/README.md); each holds one connection of the main pool.
 */
const BATCHES_IN_FLIGHT = 2;
/**
 * Calls per batch at most: one locked read of this many attempts, ~3 writes each. Also the
 * most items of one completeAttempts request, whose calls go in one batch.
 */
export const MAX_BATCH = 32;

/**
 * Every read is a locking read of the batch's own rows by primary key: READ COMMITTED
 * keeps those record locks and takes no gap or next-key locks that would hold back
 * other batches' neighbouring attempts.
 */
const ISOLATION = "READ COMMITTED";

/**
 * Calls that commit together or not at all: one worker call, or the items of one batch
 * completion (completeAttempts), which a batch never splits.
 */
interface Waiting {
  readonly inputs: readonly AttemptCallInput[];
  /** The request's deadline: once it fired, the calls answered 503 and must not commit. */
  readonly signal: AbortSignal;
  readonly resolve: (outcomes: readonly AttemptCallOutcome[]) => void;
  readonly reject: (e: unknown) => void;
}

/** Thrown inside a batch's transaction to roll it back when a member's deadline passed. */
class MemberTimedOut extends Error {}

export class AttemptBatches {
  private readonly waiting: Waiting[] = [];
  private inFlight = 0;

  /** `committed` hears of each committed batch's appends and requeues (services.ts afterCommit). */
  constructor(
    private readonly pool: Pool,
    private readonly committed: (namespaces: Iterable<string>, queues: Iterable<string>) => void,
  ) {}

  /** Ends an attempt by a worker's call; resolves with its task once committed. */
  async run(input: AttemptCallInput, signal: AbortSignal): Promise<TaskWire> {
    const [outcome] = await this.runTogether([input], signal);
    if (outcome!.error) throw outcome!.error;
    return toWireTask(outcome!.task);
  }

  /**
   * Ends attempts by the calls of one request (at most MAX_BATCH), in one transaction,
   * possibly with other waiting calls; resolves with what each came to, in order, once
   * committed. A refused call (404, 400, 409, 401) is an outcome, not a rejection.
   */
  runTogether(inputs: readonly AttemptCallInput[], signal: AbortSignal): Promise<readonly AttemptCallOutcome[]> {
    if (inputs.length < 1 || inputs.length > MAX_BATCH) throw new Error(`${inputs.length} calls cannot go together`);
    return new Promise((resolve, reject) => {
      this.waiting.push({ inputs, signal, resolve, reject });
      this.next();
    });
  }

  private next(): void {
    while (this.inFlight < BATCHES_IN_FLIGHT && this.waiting.length > 0) {
      let calls = 0;
      let taken = 0;
      while (taken < this.waiting.length && calls + this.waiting[taken]!.inputs.length <= MAX_BATCH)
        calls += this.waiting[taken++]!.inputs.length;
      const batch = this.waiting.splice(0, taken).filter((w) => {
        if (w.signal.aborted) w.reject(unavailable());
        return !w.signal.aborted;
      });
      if (batch.length === 0) continue;
      this.inFlight++;
      void this.commit(batch).finally(() => {
        this.inFlight--;
        this.next();
      });
    }
    attemptCallsWaiting.set(this.waiting.reduce((n, w) => n + w.inputs.length, 0));
  }

  private async commit(batch: readonly Waiting[]): Promise<void> {
    attemptBatchSize.observe(batch.reduce((n, w) => n + w.inputs.length, 0));
    let outcomes: AttemptCallOutcome[];
    try {
      outcomes = await withTransaction(
        this.pool,
        (tx) =>
          endAttemptCalls(
            tx,
            batch.flatMap((w) => w.inputs),
            () => {
              if (batch.some((w) => w.signal.aborted)) throw new MemberTimedOut();
            },
          ),
        undefined,
        ISOLATION,
      );
    } catch (e) {
      if (!(e instanceof MemberTimedOut)) this.mayHaveCommitted(batch);
      if (batch.length === 1)
        return batch[0]!.reject(e instanceof MemberTimedOut ? unavailable() : translateDbError(e));
      // Rolled back: each request's calls run again alone, with its own deadline and
      // retries. A batch saves work; it never changes an answer.
      await Promise.all(batch.map((w) => this.alone(w)));
      return;
    }
    this.settle(batch, outcomes);
  }

  private async alone(w: Waiting): Promise<void> {
    if (w.signal.aborted) return w.reject(unavailable());
    try {
      const deadline = () => {
        if (w.signal.aborted) throw unavailable();
      };
      const outcomes = await withTransaction(
        this.pool,
        (tx) => endAttemptCalls(tx, w.inputs, deadline),
        w.signal,
        ISOLATION,
      );
      this.settle([w], outcomes);
    } catch (e) {
      this.mayHaveCommitted([w]);
      w.reject(translateDbError(e));
    }
  }

  /**
   * A transaction that failed with the database, not by a refusal, may have committed: its
   * COMMIT ran but the answer was lost (connection cut). Its events are numbered now, not at
   * the sweep (5 s): the call repeated, alone or by the worker, finds its attempt ended and
   * appends nothing, so it starts no numbering. A pass that finds nothing costs one query.
   */
  private mayHaveCommitted(calls: readonly Waiting[]): void {
    this.committed(new Set(calls.flatMap((w) => w.inputs.map((i) => i.caller.namespaceId))), []);
  }

  private settle(batch: readonly Waiting[], outcomes: readonly AttemptCallOutcome[]): void {
    const namespaces = new Set<string>();
    const queues = new Set<string>();
    for (const o of outcomes) {
      // A 409 whose expiry was written moved its task all the same (worker.ts).
      const moved = o.error ? o.expired : o.appended ? o.task : undefined;
      if (!moved) continue;
      namespaces.add(moved.namespace_id);
      if (moved.state === "QUEUED") queues.add(moved.queue_id);
    }
    this.committed(namespaces, queues);
    let at = 0;
    for (const w of batch) {
      w.resolve(outcomes.slice(at, at + w.inputs.length));
      at += w.inputs.length;
    }
  }
}

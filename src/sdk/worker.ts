// The automatic worker (docs/tasks.md §6): keeps up to `concurrency` tasks of one queue
// running. It claims in batches of the free slots (long-polling; with half or fewer free,
// it waits a moment for more), runs handler(task, ctx) for each, and completes in batches:
// the completions that finish while a completions request is in flight go together in the
// next one. A handler that throws has its task requeued (a safe retry: the handler said it
// did nothing). A completion the node refuses item by item (409 after a lost lease, 404) is
// reported, never retried: the task is the node's again. A claim is never repeated once it
// may have reached the node (client.ts): the worker backs off and claims anew; a claim
// refused for good (401, 403, 404, 400) ends it.
import { OrbitClient, type WithRaw } from "./client.js";
import { Backoff } from "./backoff.js";
import { OrbitApiError } from "./errors.js";
import type { ClaimResult, CompleteAttemptsItem, Task } from "./types.js";

/** What a handler resolves with: the completion of its attempt. */
export type WorkerOutcome = Omit<WithRaw<CompleteAttemptsItem, "result">, "attempt_id">;

export interface WorkerContext {
  readonly attemptId: string;
  /** The end of the attempt's lease: a completion after it is refused (409 STATE_CONFLICT). */
  readonly leaseUntil: string;
  /** Aborted when stop()'s deadline passes with the handler still running. */
  readonly signal: AbortSignal;
}

/** A completion the node refused in its own place of a batch; the task is no longer this worker's. */
export interface RefusedCompletion {
  readonly attemptId: string;
  readonly taskId: string;
  readonly status: number;
  readonly code: string;
  readonly message: string;
}

export interface WorkerOptions {
  readonly baseUrl: string;
  /** Send the token over plain http:// to a host that is not loopback (default false: refused). */
  readonly allowInsecure?: boolean;
  /** A credential with tasks:work on the queue. */
  readonly token: string;
  readonly queueId: string;
  /** How many handlers run at once, 1-32 (default 8). */
  readonly concurrency?: number;
  /**
   * Resolves with the attempt's completion, e.g. `{ outcome: "succeeded", result }`. A
   * rejection requeues the task (reason: the error's message) and is passed to onError.
   */
  readonly handler: (task: Task, ctx: WorkerContext) => Promise<WorkerOutcome>;
  /** The claim's long-poll, 0-30000 ms (default 20000). */
  readonly waitMs?: number;
  /** Problems that do not stop the worker: handler failures, failed claims and requests. */
  readonly onError?: (e: unknown, attempt?: { attemptId: string; taskId: string }) => void;
  /** A refused completion; without it, onError gets it as an OrbitApiError. */
  readonly onRefused?: (r: RefusedCompletion) => void;
  /** Back-off after a failed claim, jittered over its upper half (default 100 ms to 10 s). */
  readonly backoff?: { readonly initialMs?: number; readonly maxMs?: number };
}

export interface WorkerStopOptions {
  /** How long running handlers and their completions get (default 10000 ms). */
  readonly deadlineMs?: number;
}

/** Why the worker ended: stop() was called, or a claim was refused in a way no retry mends. */
export type WorkerStopReason = { readonly stopped: true } | { readonly stopped: false; readonly error: OrbitApiError };

const MAX_BATCH = 32;
/**
 * With half its slots or fewer free, the worker waits this long at most for more before it
 * claims, so that slots freed together go in one claim (Worker.gather).
 */
const GATHER_MS = 2;

interface Pending {
  readonly item: WithRaw<CompleteAttemptsItem, "result">;
  readonly claim: ClaimResult;
  readonly done: () => void;
}

export class Worker {
  readonly done: Promise<WorkerStopReason>;
  private finish!: (r: WorkerStopReason) => void;
  private readonly concurrency: number;
  private readonly waitMs: number;
  /** Handlers running now: claims ask only for the slots left. */
  private readonly handlers = new Map<string, AbortController>();
  /** Every claimed task until its completion or requeue is answered (what stop() drains). */
  private readonly settling = new Set<Promise<void>>();
  private pending: Pending[] = [];
  private flushing = false;
  private started = false;
  private draining = false;
  /** After stop() resolved: nothing more is sent. */
  private closed = false;
  private loopDone: Promise<void> = Promise.resolve();
  private readonly stopping = new AbortController();
  private wake: (() => void) | undefined;
  // #private: util.inspect (a logged worker) shows TypeScript's private fields, and the
  // options and the client hold the bearer token.
  readonly #o: WorkerOptions;
  readonly #client: OrbitClient;

  constructor(o: WorkerOptions) {
    this.concurrency = o.concurrency ?? 8;
    this.waitMs = o.waitMs ?? 20_000;
    // A claim the contract refuses would fail on every loop: say so now.
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1 || this.concurrency > MAX_BATCH)
      throw new RangeError(`concurrency must be an integer 1-32, not ${this.concurrency}`);
    if (typeof o.queueId !== "string" || !/^[0-9a-f]{32}$/.test(o.queueId))
      throw new RangeError("queueId must be 32 lowercase hex characters");
    if (!Number.isInteger(this.waitMs) || this.waitMs < 0 || this.waitMs > 30_000)
      throw new RangeError(`waitMs must be an integer 0-30000, not ${this.waitMs}`);
    if (typeof o.handler !== "function") throw new TypeError("handler must be a function");
    this.#o = o;
    this.#client = new OrbitClient({
      baseUrl: o.baseUrl,
      token: o.token,
      ...(o.allowInsecure !== undefined ? { allowInsecure: o.allowInsecure } : {}),
    });
    this.done = new Promise((resolve) => (this.finish = resolve));
  }

  /** Starts claiming; `done` settles when the worker ends. */
  start(): this {
    if (this.started || this.draining) return this;
    this.started = true;
    this.loopDone = this.loop();
    return this;
  }

  /** Handlers running now. */
  get running(): number {
    return this.handlers.size;
  }

  private async loop(): Promise<void> {
    const backoff = new Backoff(this.#o.backoff?.initialMs, this.#o.backoff?.maxMs);
    while (!this.draining) {
      if (this.concurrency - this.handlers.size <= 0) {
        await new Promise<void>((r) => (this.wake = r));
        continue;
      }
      await this.gather();
      if (this.draining) break;
      const free = this.concurrency - this.handlers.size;
      let claimed;
      try {
        claimed = await this.#client.claimTasks(
          { queue_id: this.#o.queueId, max_tasks: free, wait_ms: this.waitMs },
          { signal: this.stopping.signal },
        );
        backoff.reset();
      } catch (e) {
        if (this.draining) break; // stop() gave up the long-poll: not a failure
        if (e instanceof OrbitApiError && !retryable(e)) return this.end({ stopped: false, error: e });
        this.report(e);
        const retryAfter = e instanceof OrbitApiError ? (e.retryAfterMs ?? 0) : 0;
        await this.sleep(backoff.next(retryAfter));
        continue;
      }
      for (const c of claimed?.claims ?? []) {
        // Taken as stop() came: given back at once rather than left to its lease.
        if (this.draining) this.track(this.requeue(c, "worker stopping"));
        else this.run(c);
      }
    }
  }

  /**
   * Half the slots or fewer free: waits, GATHER_MS at most, until more are, so that slots
   * freed within GATHER_MS of each other go in one claim. Without it a claim that came back
   * short (the queue held fewer tasks than free slots) splits the claims for good: the slots
   * its handlers free while the next claim is under way are claimed apart from those of that
   * claim, two requests each time where one would do.
   */
  private async gather(): Promise<void> {
    if (!this.gathering()) return;
    let timer: NodeJS.Timeout | undefined;
    let over = false;
    const timeUp = new Promise<void>((r) => (timer = setTimeout(r, GATHER_MS))).then(() => void (over = true));
    while (!over && !this.draining && this.gathering())
      await Promise.race([new Promise<void>((r) => (this.wake = r)), timeUp]);
    clearTimeout(timer);
  }

  /** Half the slots or fewer are free, of a worker with more than one. */
  private gathering(): boolean {
    return (this.concurrency - this.handlers.size) * 2 <= this.concurrency && this.concurrency > 1;
  }

  private run(c: ClaimResult): void {
    const abort = new AbortController();
    this.handlers.set(c.attempt_id, abort);
    const ctx: WorkerContext = { attemptId: c.attempt_id, leaseUntil: c.lease_until, signal: abort.signal };
    // A handler that throws synchronously fails like one that rejects.
    const handled = new Promise<WorkerOutcome>((resolve) => resolve(this.#o.handler(c.task, ctx)));
    const settled = handled.then(
      (outcome) => {
        this.free(c.attempt_id);
        return this.complete(c, outcome);
      },
      (e: unknown) => {
        this.free(c.attempt_id);
        this.report(e, c);
        return this.requeue(c, `handler failed: ${e instanceof Error ? e.message : String(e)}`);
      },
    );
    this.track(settled);
  }

  private track(p: Promise<void>): void {
    const guarded = p.catch((e: unknown) => this.report(e));
    this.settling.add(guarded);
    void guarded.finally(() => this.settling.delete(guarded));
  }

  private free(attemptId: string): void {
    this.handlers.delete(attemptId);
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }

  private async requeue(c: ClaimResult, reason: string): Promise<void> {
    if (this.closed) return; // after stop(): left to its lease
    // A reason is 1-1024 code points.
    const r = [...(reason || "handler failed")].slice(0, 1024).join("");
    try {
      await this.#client.requeueAttempt(c.attempt_id, { reason: r });
    } catch (e) {
      this.report(e, c); // e.g. 409 after a lost lease: the task came back without us
    }
  }

  private complete(c: ClaimResult, outcome: WorkerOutcome): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise<void>((done) => {
      this.pending.push({ item: { ...outcome, attempt_id: c.attempt_id }, claim: c, done });
      void this.flush();
    });
  }

  // One completions request at a time: what finishes meanwhile waits and goes with the next.
  private async flush(): Promise<void> {
    if (this.flushing) return;
    this.flushing = true;
    try {
      while (this.pending.length > 0 && !this.closed) {
        const batch = this.pending.splice(0, MAX_BATCH);
        try {
          const answer = await this.#client.completeAttempts({ items: batch.map((p) => p.item) });
          answer.items.forEach((a, i) => {
            const p = batch[i]!;
            if (a.status !== 200 && "error" in a) this.refused(p.claim, a.status, a.error.code, a.error.message);
          });
        } catch (e) {
          // No answer after the client's retries (or a refusal of the whole request): the
          // attempts stay RUNNING and come back when their leases run out.
          for (const p of batch) this.report(e, p.claim);
        }
        for (const p of batch) p.done();
      }
    } finally {
      this.flushing = false;
    }
  }

  private refused(c: ClaimResult, status: number, code: string, message: string): void {
    const r = { attemptId: c.attempt_id, taskId: c.task.id, status, code, message };
    if (this.#o.onRefused) this.#o.onRefused(r);
    else this.report(new OrbitApiError(code as OrbitApiError["code"], message, status, undefined), c);
  }

  /**
   * Stops claiming (a long-poll under way is given up), lets running handlers finish and
   * their completions be answered within deadlineMs, then resolves. A handler still running
   * then has its signal aborted and nothing of it is sent: its task comes back when its lease
   * runs out (an attempt used).
   */
  async stop(o: WorkerStopOptions = {}): Promise<WorkerStopReason> {
    this.draining = true;
    this.stopping.abort();
    this.free(""); // a loop waiting for a slot sees the stop
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((r) => (timer = setTimeout(r, o.deadlineMs ?? 10_000)));
    try {
      await Promise.race([
        (async () => {
          await this.loopDone;
          while (this.settling.size > 0) await Promise.all([...this.settling]);
        })(),
        deadline,
      ]);
    } finally {
      clearTimeout(timer);
    }
    this.closed = true;
    for (const a of this.handlers.values()) a.abort(new Error("worker stopped"));
    this.end({ stopped: true });
    return this.done;
  }

  private report(e: unknown, c?: ClaimResult): void {
    this.#o.onError?.(e, c ? { attemptId: c.attempt_id, taskId: c.task.id } : undefined);
  }

  private end(r: WorkerStopReason): void {
    this.draining = true;
    this.finish(r);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const signal = this.stopping.signal;
      const wake = () => (clearTimeout(t), resolve());
      const t = setTimeout(() => (signal.removeEventListener("abort", wake), resolve()), ms);
      signal.addEventListener("abort", wake, { once: true });
    });
  }
}

/** Network failures, 429 and 5xx pass; any other refusal of a claim would recur on every try. */
function retryable(e: OrbitApiError): boolean {
  return e.status === 429 || e.status >= 500;
}

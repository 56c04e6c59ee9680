// Wakes long-polling claims on this node when a task becomes QUEUED here (submit,
// requeue, lease recovery). Work queued by another node is found by the claim's own
// poll, at most POLL_INTERVAL_MS later: an idle waiting claim costs one claim
// transaction (4 statements) per second, not a busy loop.
export const POLL_INTERVAL_MS = 1000;

export class QueueSignals {
  private readonly waiters = new Map<string, Set<() => void>>();
  private closed = false;

  /** Resolves on a signal for the queue, after `ms`, on abort or when closing. */
  wait(queueId: string, ms: number, signal?: AbortSignal): Promise<void> {
    if (this.closed || signal?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const set = this.waiters.get(queueId) ?? new Set();
      this.waiters.set(queueId, set);
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", done);
        set.delete(done);
        if (set.size === 0) this.waiters.delete(queueId);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal?.addEventListener("abort", done, { once: true });
      set.add(done);
    });
  }

  /** Wakes every claim waiting on the queue: each retries its claim once. */
  notify(queueId: string): void {
    for (const w of [...(this.waiters.get(queueId) ?? [])]) w();
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Shutdown: waiting claims answer now (204) instead of holding the node open. */
  close(): void {
    this.closed = true;
    for (const set of [...this.waiters.values()]) for (const w of [...set]) w();
  }
}

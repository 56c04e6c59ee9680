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

  /**
   * Wakes up to `count` claims waiting on the queue, the longest-waiting first; each
   * retries its claim once. One new task wakes one claim: waking every waiter would cost a
   * claim transaction per waiting worker for a task only one of them can take. A wake-up
   * whose claim misses the task (a claim that was not waiting took it first) costs nothing
   * more than that claim: the others still poll.
   */
  notify(queueId: string, count = Number.POSITIVE_INFINITY): void {
    const set = this.waiters.get(queueId);
    if (!set) return;
    let left = count;
    for (const w of [...set]) {
      if (left-- <= 0) break;
      w();
    }
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

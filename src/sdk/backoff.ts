// Exponential back-off for the SDK's reconnecting loops (Consumer, Worker).

/**
 * Each wait is jittered over the upper half of the current delay, so that many clients do
 * not retry in step and none waits ~0 ms; the delay doubles after each wait up to its
 * maximum, and reset() starts it again after a call that did its work.
 */
export class Backoff {
  #delay: number;

  constructor(
    private readonly initialMs = 100,
    private readonly maxMs = 10_000,
  ) {
    this.#delay = initialMs;
  }

  reset(): void {
    this.#delay = this.initialMs;
  }

  /** The next wait in ms, never shorter than `notBeforeMs` (a Retry-After). */
  next(notBeforeMs = 0): number {
    const d = this.#delay;
    this.#delay = Math.min(this.maxMs, d * 2);
    return Math.max(notBeforeMs, d / 2 + (Math.random() * d) / 2);
  }
}

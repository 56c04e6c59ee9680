// The clocks of one event session (docs/protocol.md §5, §7): the hello must come within
// the hello timeout of the upgrade, a valid frame within the idle timeout of the last one,
// and a bound session claims at every recheck even without a trigger, which is how it
// recovers expired leases when nothing else happens.
export class SessionTimers {
  private hello: NodeJS.Timeout | undefined;
  private idle: NodeJS.Timeout | undefined;
  private recheck: NodeJS.Timeout | undefined;

  /** `late(reason)`: a deadline passed; the session closes with 1008. */
  constructor(
    private readonly late: (reason: string) => void,
    private readonly idleTimeoutMs: number,
  ) {}

  awaitHello(timeoutMs: number): void {
    this.hello = setTimeout(() => this.late("no hello in time"), timeoutMs);
  }

  /** The hello came in time: from here the idle clock bounds the session. */
  helloCame(): void {
    clearTimeout(this.hello);
  }

  /** A valid frame came: the idle clock starts again. */
  touch(): void {
    clearTimeout(this.idle);
    this.idle = setTimeout(() => this.late("no valid frame in time"), this.idleTimeoutMs);
  }

  recheckEvery(intervalMs: number, claim: () => void): void {
    this.recheck = setInterval(claim, intervalMs);
  }

  stop(): void {
    clearTimeout(this.hello);
    clearTimeout(this.idle);
    clearInterval(this.recheck);
  }
}

// The chaos run's child processes (nodes, SDK workers, Inbox consumers): started, killed,
// frozen and thawed by the schedule. Every exit the run did not cause is recorded, with
// the process's last lines: a process of Orbit's, or of its SDK, that dies on its own has
// crashed. As a supervisor would, the run starts it again.
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** A start that prints no ready line within this long is killed and tried again. */
const READY_WITHIN_MS = 30_000;
/** A start is tried again for this long before the run gives up on the process. */
const START_DEADLINE_MS = 90_000;

export interface ProcessSpec {
  readonly name: string;
  readonly args: string[];
  /** Read at every start, so that a restart can change it (a node's clock skew). */
  env(): Record<string, string>;
  /**
   * The line that says the process is ready. An exit before it is a failed start (its
   * database down), tried again, not a crash.
   */
  readonly readyWhen: (line: string) => boolean;
  /** Every line of its stdout and stderr. */
  readonly onLine?: (line: string) => void;
}

export class Managed {
  private child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();
  private expectingExit = false;
  /** kill() was called and no start() since: nothing brings the process back. */
  private halted = false;
  private starting: Promise<void> | undefined;
  private restartTimer: NodeJS.Timeout | undefined;
  /** The process's last lines, for the report of an exit nobody asked for. */
  private readonly tail: string[] = [];
  frozen = false;
  /** Exits nobody asked for, each with the process's last lines. */
  readonly unexpectedExits: string[] = [];
  /** Starts that ended before the process was ready (a node started while the database is down). */
  failedStarts = 0;

  constructor(readonly spec: ProcessSpec) {}

  get alive(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Starts the process unless it runs; a start that ends before it is ready is tried again. */
  start(): Promise<void> {
    this.halted = false;
    if (this.alive && !this.starting) return Promise.resolve();
    this.starting ??= this.startUntilReady().finally(() => (this.starting = undefined));
    return this.starting;
  }

  private async startUntilReady(): Promise<void> {
    const until = Date.now() + START_DEADLINE_MS;
    while (!this.halted) {
      if ((await this.startOnce()) || this.halted) return;
      this.failedStarts++;
      if (Date.now() > until) throw new Error(`${this.spec.name} did not start`);
      await sleep(500);
    }
  }

  private startOnce(): Promise<boolean> {
    this.expectingExit = false;
    this.frozen = false;
    const child = spawn(process.execPath, this.spec.args, {
      env: { ...process.env, ...this.spec.env() },
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.child = child;
    let ready = false;
    return new Promise<boolean>((resolve) => {
      const slow = setTimeout(() => child.kill("SIGKILL"), READY_WITHIN_MS);
      const onLine = (line: string) => {
        this.spec.onLine?.(line);
        this.tail.push(line);
        if (this.tail.length > 5) this.tail.shift();
        if (!ready && this.spec.readyWhen(line)) {
          ready = true;
          clearTimeout(slow);
          resolve(true);
        }
      };
      createInterface({ input: child.stdout! }).on("line", onLine);
      createInterface({ input: child.stderr! }).on("line", onLine);
      // 'close', not 'exit': the process's last lines have been read by then.
      this.exited = new Promise<void>((done) =>
        child.once("close", (code, signal) => {
          clearTimeout(slow);
          if (!ready) resolve(false);
          else if (!this.expectingExit) {
            this.unexpectedExits.push(`${this.spec.name} exited (${signal ?? code}): ${this.tail.join(" | ")}`);
            this.restartTimer = setTimeout(() => void this.start().catch(() => undefined), 500);
          }
          done();
        }),
      );
    });
  }

  /** Sends the signal and waits for the exit; nothing starts the process again until start(). */
  async kill(signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
    this.halted = true;
    clearTimeout(this.restartTimer);
    if (!this.alive) return;
    this.expectingExit = true;
    this.child!.kill(signal);
    // A frozen process is thawed, so that SIGTERM can act.
    if (this.frozen) this.thaw();
    await this.exited;
  }

  /** SIGSTOP: the process holds its sockets and does nothing, as a stalled VM or a long GC pause. */
  freeze(): void {
    if (!this.alive || this.frozen) return;
    this.child!.kill("SIGSTOP");
    this.frozen = true;
  }

  thaw(): void {
    if (!this.alive || !this.frozen) return;
    this.child!.kill("SIGCONT");
    this.frozen = false;
  }
}

// A node clock a test sets (helpers/clock-preload.ts): frozen at the millisecond written
// last. Written by rename, so the node never reads a half-written file.
import { mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";

const PRELOAD = path.resolve(process.cwd(), "dist/test/helpers/clock-preload.js");

export class TestClock {
  private readonly dir = mkdtempSync(path.join(tmpdir(), "orbit-clock-"));
  private readonly file = path.join(this.dir, "now");
  /** The millisecond the node reads now. */
  now: number;

  constructor(start: number = Date.now()) {
    this.now = start;
    this.set(start);
  }

  set(ms: number): void {
    const tmp = `${this.file}.tmp`;
    writeFileSync(tmp, String(ms));
    renameSync(tmp, this.file);
    this.now = ms;
  }

  /** The environment of a node (startNode) that reads this clock. */
  env(): Record<string, string> {
    const options = [process.env.NODE_OPTIONS ?? "", `--import=${pathToFileURL(PRELOAD).href}`].join(" ").trim();
    return { ORBIT_TEST_CLOCK_FILE: this.file, NODE_OPTIONS: options };
  }

  remove(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

// `npm run chaos` as CI runs it: a short seed, run as a user runs it, must end with every
// check passed. A longer run is a command of its own (docs/testing.md).
import { strict as assert } from "node:assert";
import { spawn } from "node:child_process";
import path from "node:path";

const RUNNER = path.resolve(process.cwd(), "dist/test/chaos/run.js");
/** A seed whose first 45 s hold each of the ten kinds of fault. */
const CI_SEED = 20261275;
const KINDS = [
  "kill-node",
  "freeze-node",
  "restart-node",
  "kill-consumer",
  "freeze-consumer",
  "kill-worker",
  "cut-database",
  "stall-database",
  "lose-commit-answer",
  "crash-database",
];

describe("chaos run, short seed", function () {
  this.timeout(600_000);

  it(`passes seed ${CI_SEED} for 45 s of faults`, async () => {
    const child = spawn(process.execPath, [RUNNER, "--seed", String(CI_SEED), "--minutes", "0.75"], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    const code = await new Promise<number | null>((r) => child.on("close", r));
    assert.equal(code, 0, out);
    assert.match(out, /^14 passed, 0 failed$/m, out);
    for (const kind of KINDS) assert.match(out, new RegExp(`\\] ${kind}\\b`), `no ${kind} in:\n${out}`);
  });
});

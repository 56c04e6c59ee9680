// The JSON logger: a level drops the lines below it; every line names pid and hostname.
import { strict as assert } from "node:assert";
import os from "node:os";
import { jsonLogger } from "../../src/log/index.js";

describe("json logger", () => {
  it("writes the lines at or above its level, each with pid and hostname", () => {
    const lines: string[] = [];
    const log = jsonLogger("warn", (l) => lines.push(l));
    for (const level of ["debug", "info", "warn", "error"] as const) log.log(level, level, { n: 1 });
    const parsed = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.deepEqual(
      parsed.map((l) => l.level),
      ["warn", "error"],
    );
    for (const l of parsed) {
      assert.equal(l.pid, process.pid);
      assert.equal(l.hostname, os.hostname());
      assert.equal(l.n, 1);
    }
    assert.ok(lines.every((l) => l.endsWith("\n")));
  });

  it("writes everything at debug, and from info up by default", () => {
    const all: string[] = [];
    const debug = jsonLogger("debug", (l) => all.push(l));
    debug.log("debug", "d");
    assert.equal(all.length, 1);
    const some: string[] = [];
    const info = jsonLogger(undefined, (l) => some.push(l));
    info.log("debug", "d");
    info.log("info", "i");
    assert.deepEqual(
      some.map((l) => (JSON.parse(l) as { msg: string }).msg),
      ["i"],
    );
  });
});

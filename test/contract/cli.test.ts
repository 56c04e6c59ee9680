// Every `orbit` command has --help, and a wrong option is a usage error (exit 2).
import { strict as assert } from "node:assert";
import { runCli } from "../helpers/orbit.js";

describe("orbit CLI", () => {
  for (const cmd of ["migrate", "bootstrap", "serve", "revoke", "purge", "events", "listen"]) {
    it(`orbit ${cmd} --help prints its usage and exits 0`, async () => {
      const res = await runCli([cmd, "--help"]);
      assert.equal(res.code, 0, res.stderr);
      assert.match(res.stdout, new RegExp(`^Usage: orbit ${cmd}`));
    });

    it(`orbit ${cmd} refuses an unknown option with exit 2`, async () => {
      const res = await runCli([cmd, "--no-such-option"]);
      assert.equal(res.code, 2);
      assert.match(res.stderr, /no-such-option/);
    });
  }

  it("orbit --help lists the commands; an unknown command exits 2", async () => {
    const help = await runCli(["--help"]);
    assert.equal(help.code, 0);
    for (const cmd of ["migrate", "bootstrap", "serve", "revoke", "purge", "events", "listen"]) assert.match(help.stdout, new RegExp(`\\b${cmd}\\b`));
    const bad = await runCli(["frobnicate"]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /unknown command/);
  });

  it("orbit serve refuses bad configuration with a clear message", async () => {
    const res = await runCli(["serve"], { ORBIT_PORT: "eighty" });
    assert.equal(res.code, 1);
    assert.match(res.stderr, /ORBIT_PORT must be a whole number/);
  });
});

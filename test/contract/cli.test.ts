// Every `orbit` command has --help, and a wrong option is a usage error (exit 2).
import { strict as assert } from "node:assert";
import net from "node:net";
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

  it("orbit serve exits 1 at once when its address is in use, saying so", async () => {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    try {
      const port = (taken.address() as net.AddressInfo).port;
      // --no-migrate and a database that does not exist (nothing newer to refuse): the
      // listener fails before the node serves anything.
      const res = await runCli(["serve", "--no-migrate"], { ORBIT_PORT: String(port), ORBIT_DATABASE_URL: "mysql://root@127.0.0.1:3306/orbit_never_opened" });
      assert.equal(res.code, 1);
      assert.match(res.stderr, new RegExp(`cannot listen on 127\\.0\\.0\\.1:${port}: the address is in use`));
      assert.doesNotMatch(res.stderr, /database error/);
    } finally {
      taken.close();
    }
  });

  it("refuses an option given twice that takes one value (exit 2), never taking the last silently", async () => {
    // `bootstrap --namespace a --namespace b` created everything in b.
    for (const args of [
      ["bootstrap", "--namespace", "a", "--namespace", "b", "--application", "x", "--queue", "q"],
      ["purge", "--namespace", "a", "--before", "1", "--before=2"],
      ["listen", "--subscription", "0".repeat(32), "--subscription", "1".repeat(32)],
    ]) {
      const res = await runCli(args, { ORBIT_DATABASE_URL: "mysql://root@127.0.0.1:1/orbit_unused", ORBIT_TOKEN: "t" });
      assert.equal(res.code, 2, `${args.join(" ")}: ${res.stderr}`);
      assert.match(res.stderr, /--(namespace|before|subscription) is given more than once/);
    }
  });

  it("echoes a bad name argument JSON-escaped, so control characters never reach the terminal", async () => {
    // The names were echoed raw: an ESC sequence recoloured the terminal, a newline forged a line.
    const hostile = "a\u001b[31mred\nX";
    for (const args of [["bootstrap", "--namespace", hostile, "--application", "x", "--queue", "q"]]) {
      const res = await runCli(args, { ORBIT_DATABASE_URL: "mysql://root@127.0.0.1:1/orbit_unused" });
      assert.equal(res.code, 2, res.stderr);
      assert.ok(!res.stderr.includes("\u001b"), JSON.stringify(res.stderr));
      assert.ok(res.stderr.includes(JSON.stringify(hostile)), JSON.stringify(res.stderr));
    }
  });

  it("names ORBIT_DATABASE_URL when its percent-encoding is malformed, and never echoes it", async () => {
    // Each command said only "URI malformed" (mysql2's decodeURIComponent of the password).
    for (const url of ["mysql://root:s3cret%ZZ@127.0.0.1:1/orbit_x", "mysql://root:s3cret@127.0.0.1:1/orbit%ZZ"]) {
      for (const args of [["migrate"], ["events", "--namespace", "ns"], ["revoke", "--credential", "0".repeat(32)]]) {
        const res = await runCli(args, { ORBIT_DATABASE_URL: url });
        assert.equal(res.code, 1, `${args[0]}: ${res.stderr}`);
        assert.match(res.stderr, /ORBIT_DATABASE_URL has malformed percent-encoding/, `${args[0]}: ${res.stderr}`);
        assert.ok(!res.stderr.includes("s3cret"), "the password is never echoed");
      }
    }
  });

  it("orbit serve refuses bad configuration with a clear message", async () => {
    const res = await runCli(["serve"], { ORBIT_PORT: "eighty" });
    assert.equal(res.code, 1);
    assert.match(res.stderr, /ORBIT_PORT must be a whole number/);
  });
});

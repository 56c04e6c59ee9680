// Every `orbit` command has --help, and a wrong option is a usage error (exit 2); the
// command table of docs/operations.md and the configuration tables of docs/configuration.md
// and README.md name what the code has, with its defaults.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { loadConfig } from "../../src/config/index.js";
import { runCli } from "../helpers/orbit.js";

/** A `## title` section of a Markdown file of the repository (mocha runs from its root). */
function docSection(file: string, title: string): string {
  const text = readFileSync(path.resolve(process.cwd(), file), "utf8");
  const start = text.indexOf(`\n## ${title}\n`);
  assert.ok(start >= 0, `${file} has no "## ${title}" section`);
  const end = text.indexOf("\n## ", start + 1);
  return text.slice(start, end < 0 ? undefined : end);
}

/** The rows of a configuration table: each variable with its stated default (undefined: unset). */
function configRows(table: string): Map<string, string | undefined> {
  const rows = [...table.matchAll(/^\| (`ORBIT_[A-Z_]+`(?: \/ `ORBIT_[A-Z_]+`)*) \| ([^|]+) \|/gm)];
  const documented = new Map<string, string | undefined>();
  for (const [, names, defaults] of rows) {
    const vars = [...names!.matchAll(/`(ORBIT_[A-Z_]+)`/g)].map((m) => m[1]!);
    const values =
      defaults!.trim() === "unset"
        ? vars.map(() => undefined)
        : [...defaults!.matchAll(/`([^`]*)`/g)].map((m) => m[1]!);
    assert.equal(values.length, vars.length, `defaults of ${names}`);
    vars.forEach((name, i) => {
      assert.ok(!documented.has(name), `${name} is in the table twice`);
      documented.set(name, values[i]);
    });
  }
  return documented;
}

/** A valid value of each variable whose default is "unset" (ORBIT_RETENTION's is 12h). */
const UNSET_SAMPLES: Readonly<Record<string, string>> = {
  ORBIT_METRICS_PORT: "9090",
  ORBIT_METRICS_HOST: "127.0.0.2",
  ORBIT_TRUSTED_PROXIES: "10.0.0.0/8",
  ORBIT_MAX_QUEUED_TASKS_PER_NAMESPACE: "10000",
};

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
    for (const cmd of ["migrate", "bootstrap", "serve", "revoke", "purge", "events", "listen"])
      assert.match(help.stdout, new RegExp(`\\b${cmd}\\b`));
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
      const res = await runCli(["serve", "--no-migrate"], {
        ORBIT_PORT: String(port),
        ORBIT_DATABASE_URL: "mysql://root@127.0.0.1:3306/orbit_never_opened",
      });
      assert.equal(res.code, 1);
      assert.match(res.stderr, new RegExp(`cannot listen on 127\\.0\\.0\\.1:${port}: the address is in use`));
      assert.doesNotMatch(res.stderr, /database error/);
    } finally {
      taken.close();
    }
  });

  it("refuses an option given twice that takes one value (exit 2), never taking the last silently", async () => {
    // Taking the last, `bootstrap --namespace a --namespace b` would create everything in b.
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

  it("refuses a missing required option with exit 2, naming it", async () => {
    // docs/operations.md: a missing argument is a usage error (2), not a failure (1). The database is
    // unreachable: the refusal comes before any connection.
    for (const [args, message] of [
      [["purge", "--namespace", "ns"], /--namespace and --before are required/],
      [["purge", "--before", "1"], /--namespace and --before are required/],
      [["events"], /--namespace is required/],
      [["events", "--after", "1", "--limit", "5"], /--namespace is required/],
    ] as const) {
      const res = await runCli([...args], { ORBIT_DATABASE_URL: "mysql://root@127.0.0.1:1/orbit_unused" });
      assert.equal(res.code, 2, `${args.join(" ")}: ${res.stderr}`);
      assert.match(res.stderr, message);
    }
  });

  it("echoes a bad name argument JSON-escaped, so control characters never reach the terminal", async () => {
    // Echoed raw, an ESC sequence would recolour the terminal and a newline forge a line.
    const hostile = "a\u001b[31mred\nX";
    for (const args of [["bootstrap", "--namespace", hostile, "--application", "x", "--queue", "q"]]) {
      const res = await runCli(args, { ORBIT_DATABASE_URL: "mysql://root@127.0.0.1:1/orbit_unused" });
      assert.equal(res.code, 2, res.stderr);
      assert.ok(!res.stderr.includes("\u001b"), JSON.stringify(res.stderr));
      assert.ok(res.stderr.includes(JSON.stringify(hostile)), JSON.stringify(res.stderr));
    }
  });

  it("names ORBIT_DATABASE_URL when its percent-encoding is malformed, and never echoes it", async () => {
    // Not just "URI malformed" (mysql2's decodeURIComponent of the password).
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
    const sweep = await runCli(["serve"], { ORBIT_SEQUENCER_SWEEP_MS: "50" });
    assert.equal(sweep.code, 1);
    assert.match(sweep.stderr, /ORBIT_SEQUENCER_SWEEP_MS must be between 100 and 3600000, got 50/);
    const socket = await runCli(["serve"], { ORBIT_DATABASE_SOCKET: "/run/mysqld/mysqld.sock" });
    assert.equal(socket.code, 1);
    assert.match(socket.stderr, /ORBIT_DATABASE_SOCKET must be auto or off/);
    const refused: [Record<string, string>, RegExp][] = [
      [{ ORBIT_METRICS_PORT: "nine" }, /ORBIT_METRICS_PORT must be a whole number, got "nine"/],
      [{ ORBIT_METRICS_PORT: "65536" }, /ORBIT_METRICS_PORT must be between 0 and 65535, got 65536/],
      [
        { ORBIT_METRICS_PORT: "9090", ORBIT_PORT: "9090" },
        /ORBIT_METRICS_PORT must differ from ORBIT_PORT, both are 9090/,
      ],
      [{ ORBIT_METRICS_REFRESH_MS: "99" }, /ORBIT_METRICS_REFRESH_MS must be between 100 and 3600000, got 99/],
      [
        { ORBIT_MAX_QUEUED_TASKS_PER_NAMESPACE: "0" },
        /ORBIT_MAX_QUEUED_TASKS_PER_NAMESPACE must be between 1 and 1000000000, got 0/,
      ],
      [{ ORBIT_MAX_QUEUED_TASKS_PER_NAMESPACE: "-5" }, /ORBIT_MAX_QUEUED_TASKS_PER_NAMESPACE must be a whole number/],
      [{ ORBIT_LOG_LEVEL: "verbose" }, /ORBIT_LOG_LEVEL must be debug, info, warn or error, got "verbose"/],
      [{ ORBIT_LOG_LEVEL: "INFO" }, /ORBIT_LOG_LEVEL must be debug, info, warn or error, got "INFO"/],
      [{ ORBIT_TRUSTED_PROXIES: "10.0.0.0/33" }, /ORBIT_TRUSTED_PROXIES must be a comma list .*, got "10.0.0.0\/33"/],
      [{ ORBIT_TRUSTED_PROXIES: "127.0.0.1,proxy.internal" }, /ORBIT_TRUSTED_PROXIES must be .*, got "proxy.internal"/],
    ];
    for (const [env, message] of refused) {
      const res = await runCli(["serve"], env);
      assert.equal(res.code, 1, JSON.stringify(env));
      assert.match(res.stderr, message);
    }
  });

  it("takes ORBIT_METRICS_PORT 0 beside ORBIT_PORT 0, and the metrics host from ORBIT_HOST", () => {
    const c = loadConfig({ ORBIT_PORT: "0", ORBIT_METRICS_PORT: "0", ORBIT_HOST: "0.0.0.0" });
    assert.equal(c.metricsPort, 0);
    assert.equal(c.metricsHost, "0.0.0.0");
    assert.equal(loadConfig({ ORBIT_METRICS_HOST: "127.0.0.2" }).metricsHost, "127.0.0.2");
    assert.equal(loadConfig({}).metricsPort, undefined);
  });

  it("orbit credential: --help (also after revoke) exits 0; anything but `revoke ID` is exit 2; orbit alone exits 2", async () => {
    for (const args of [
      ["credential", "--help"],
      ["credential", "revoke", "--help"],
    ]) {
      const res = await runCli(args);
      assert.equal(res.code, 0, res.stderr);
      assert.match(res.stdout, /^Usage: orbit credential revoke ID/);
    }
    for (const args of [
      ["credential"],
      ["credential", "frob", "0".repeat(32)],
      ["credential", "revoke", "0".repeat(32), "extra"],
    ]) {
      const res = await runCli(args);
      assert.equal(res.code, 2, `${args.join(" ")}: ${res.stderr}`);
      assert.match(res.stderr, /expected "credential revoke ID"/);
    }
    // A malformed ID is refused in this form's words and usage, not the other form's
    // ("--credential must be a 32-hex id", "Usage: orbit revoke --credential ID").
    const malformed = await runCli(["credential", "revoke", "xyz"]);
    assert.equal(malformed.code, 2, malformed.stderr);
    assert.match(
      malformed.stderr,
      /^orbit credential: ID must be a credential id: 32 lowercase hex characters\n\nUsage: orbit credential revoke ID/,
    );
    const bare = await runCli([]);
    assert.equal(bare.code, 2);
    assert.match(bare.stdout, /^orbit: /);
  });

  it("docs/operations.md's `orbit` command table names every command of orbit --help, and no other", async () => {
    const help = await runCli(["--help"]);
    const listed = [...help.stdout.matchAll(/^ {2}([a-z]+) {2,}/gm)].map((m) => m[1]!).sort();
    assert.deepEqual(listed, ["bootstrap", "credential", "events", "listen", "migrate", "purge", "revoke", "serve"]);
    const table = docSection("docs/operations.md", "The `orbit` command");
    const documented = new Set(
      [...table.matchAll(/^\| `orbit ([a-z]+)/gm), ...table.matchAll(/\(also `orbit ([a-z]+)/g)].map((m) => m[1]!),
    );
    assert.deepEqual([...documented].sort(), listed);
  });

  it("defaults the event connection's limits to the figures of docs/protocol.md", () => {
    // docs/protocol.md §5: a hello within 5 s of connecting; at most 128 event connections a
    // node. §7: a connection with no valid client frame read for 60 s is closed. §5 (the
    // welcome): lease_duration_ms 30000. The documented tables follow the code (the test
    // below), so only this one fails when a default moves away from the protocol with it.
    const d = loadConfig({});
    assert.deepEqual(
      {
        helloTimeoutMs: d.helloTimeoutMs,
        maxConnections: d.maxConnections,
        idleTimeoutMs: d.idleTimeoutMs,
        leaseDurationMs: d.leaseDurationMs,
      },
      { helloTimeoutMs: 5000, maxConnections: 128, idleTimeoutMs: 60000, leaseDurationMs: 30000 },
    );
  });

  it("docs/configuration.md's table: every variable exists with the stated default, and every one read is there", () => {
    const documented = configRows(docSection("docs/configuration.md", "Environment variables"));
    const base = loadConfig({});
    for (const [name, stated] of documented) {
      // Set to the stated default it changes nothing; set to another valid value it does
      // (so the variable is read at all).
      const other =
        stated === undefined
          ? (UNSET_SAMPLES[name] ?? "12h")
          : /^[0-9]+$/.test(stated)
            ? String(Number(stated) + 1)
            : /^[0-9]+[smhd]$/.test(stated)
              ? `${parseInt(stated, 10) + 1}${stated.slice(-1)}`
              : name === "ORBIT_HOST"
                ? "127.0.0.2"
                : name === "ORBIT_DATABASE_SOCKET"
                  ? "off"
                  : name === "ORBIT_LOG_LEVEL"
                    ? "debug"
                    : `${stated}_other`;
      if (stated !== undefined)
        assert.deepEqual(loadConfig({ [name]: stated }), base, `${name}=${stated} is not the default`);
      assert.notDeepEqual(loadConfig({ [name]: other }), base, `${name} is not read`);
    }
    const serveHelp = readFileSync(path.resolve(process.cwd(), "src/cli/serve.ts"), "utf8");
    const read = new Set([...serveHelp.matchAll(/ORBIT_[A-Z_]+/g)].map((m) => m[0]));
    assert.deepEqual([...documented.keys()].sort(), [...read].sort());
  });

  it("README's configuration at a glance: each variable is in docs/configuration.md, with the same default", () => {
    const full = configRows(docSection("docs/configuration.md", "Environment variables"));
    const glance = configRows(docSection("README.md", "Configuration at a glance"));
    assert.ok(glance.size > 0, "README's table names no variable");
    for (const [name, stated] of glance) {
      assert.ok(full.has(name), `${name} is not in docs/configuration.md`);
      assert.equal(stated, full.get(name), `README's default of ${name}`);
    }
  });
});

// The README's commands respect the machine they run on: they check Node.js first, set
// up a database only when the configured one is this machine's default, and the run
// command builds the server alone.
import { strict as assert } from "node:assert";
import { execFile } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
const ROOT = process.cwd();

/** Runs a script of scripts/ with bash; its exit code and all it printed. */
async function script(name: string, args: string[], env: Record<string, string> = {}) {
  try {
    const { stdout, stderr } = await run("bash", [path.join(ROOT, "scripts", name), ...args], {
      env: { ...process.env, ...env },
      timeout: 120000,
    });
    return { code: 0, out: stdout + stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: err.code ?? -1, out: (err.stdout ?? "") + (err.stderr ?? "") };
  }
}

describe("the README's scripts", function () {
  this.timeout(180000);

  describe("check-node.sh", () => {
    let bin: string;
    before(() => {
      bin = mkdtempSync(path.join(tmpdir(), "orbit-node-"));
      symlinkSync(process.execPath.replace(/node$/, "npm"), path.join(bin, "npm"));
    });
    after(() => rmSync(bin, { recursive: true, force: true }));

    /** A `node` first on PATH that reports `version`, as an older install would. */
    const withNode = (version: string) => {
      writeFileSync(path.join(bin, "node"), `#!/bin/sh\necho ${version}\n`);
      chmodSync(path.join(bin, "node"), 0o755);
      return { PATH: `${bin}:${process.env.PATH}` };
    };

    it("accepts this machine's Node.js", async () => {
      assert.deepEqual(await script("check-node.sh", []), { code: 0, out: "" });
    });

    for (const old of ["v18.20.4", "v20.18.3", "v16.0.0"]) {
      it(`refuses Node.js ${old}, naming the version it needs`, async () => {
        const res = await script("check-node.sh", [], withNode(old));
        assert.equal(res.code, 1);
        assert.match(res.out, new RegExp(`Node\\.js ${old.slice(1).replace(/\./g, "\\.")} is too old`));
        assert.match(res.out, /install Node\.js 20\.19 or later/);
      });
    }

    for (const fits of ["v20.19.0", "v22.12.0", "v24.1.0"]) {
      it(`accepts Node.js ${fits}`, async () => {
        assert.equal((await script("check-node.sh", [], withNode(fits))).code, 0);
      });
    }
  });

  describe("ensure-mariadb.sh", () => {
    for (const url of [
      "mysql://orbit:secret@db.internal:3306/orbit",
      "mysql://root@127.0.0.1:3307/orbit",
      "mysql://orbit@127.0.0.1:3306/orbit",
      "mysql://root:pw@localhost:3306/orbit",
    ]) {
      it(`touches nothing for another database: ${url.replace(/:[^:@/]*@/, ":…@")}`, async () => {
        const res = await script("ensure-mariadb.sh", [url]);
        assert.equal(res.code, 0);
        assert.match(res.out, /not this machine's default: nothing to set up\n$/);
        assert.doesNotMatch(res.out, /secret|:pw@/, "a password was printed");
      });
    }

    it("touches nothing for a URL it cannot read", async () => {
      const res = await script("ensure-mariadb.sh", ["postgres://root@127.0.0.1/orbit"]);
      assert.equal(res.code, 0);
      assert.match(res.out, /nothing to set up/);
    });

    it("finds the default server answering for root, unset or named", async () => {
      for (const args of [[], ["mysql://root@127.0.0.1:3306/orbit"], ["mysql://root@localhost/orbit"]]) {
        assert.deepEqual(await script("ensure-mariadb.sh", args), {
          code: 0,
          out: "ensure-mariadb: root logs in on 127.0.0.1:3306\n",
        });
      }
    });
  });

  describe("serve.sh", () => {
    it("builds only the server: no test, benchmark or example file", async () => {
      const { stdout } = await run("npx", ["tsc", "-p", "tsconfig.server.json", "--listFilesOnly"], {
        cwd: ROOT,
        maxBuffer: 16 << 20,
      });
      const own = stdout
        .split("\n")
        .filter((f) => f.startsWith(ROOT + "/") && !f.includes("/node_modules/"))
        .map((f) => path.relative(ROOT, f));
      assert.ok(own.includes("src/cli/main.ts"));
      assert.deepEqual(
        own.filter((f) => !/^(src|generated)\//.test(f)),
        [],
      );
    });

    it("runs `orbit serve` after its checks, leaving another database alone", async () => {
      const res = await script("serve.sh", ["--help"], {
        ORBIT_DATABASE_URL: "mysql://orbit:secret@db.internal:3306/orbit",
      });
      assert.equal(res.code, 0, res.out);
      assert.match(res.out, /ensure-mariadb: the database is orbit@db\.internal:3306, not this machine's default/);
      assert.match(res.out, /Usage: orbit serve/);
    });
  });
});

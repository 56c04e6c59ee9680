// The deployment recipes the docs give, checked where these machines can check them: the
// systemd unit is verified by systemd itself, and the Dockerfile (no image can be built
// here) copies only what a clone has, runs only the commands the docs and packages give,
// runs as a user that is not root, and its health check answers as a real node does.
// The image's install path (npm pack, install with production dependencies only, `orbit
// serve`) is what test/packages/install.test.ts runs.
import { strict as assert } from "node:assert";
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { SHUTDOWN_DEADLINE_MS } from "../../src/cli/serve.js";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { startNode, type OrbitNode } from "../helpers/orbit.js";

const run = promisify(execFile);
const ROOT = process.cwd();
const read = (file: string) => readFileSync(path.join(ROOT, file), "utf8");

/** Dockerfile instructions, continuation lines joined, comments dropped. */
function instructions(text: string): { op: string; args: string }[] {
  return text
    .replace(/\\\n/g, " ")
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith("#"))
    .map((l) => {
      const [op, ...rest] = l.split(/\s+/);
      return { op: op!.toUpperCase(), args: rest.join(" ") };
    });
}

describe("deployment recipes", function () {
  this.timeout(60000);

  describe("docs/deploy/orbit.service", () => {
    const unit = read("docs/deploy/orbit.service");

    it("is a unit systemd accepts", async () => {
      const { stdout, stderr } = await run("systemd-analyze", ["verify", path.join(ROOT, "docs/deploy/orbit.service")]);
      assert.equal(stdout + stderr, "");
    });

    it("runs `orbit serve` and gives its drain time before SIGKILL", () => {
      assert.match(unit, /^ExecStart=\/usr\/bin\/env orbit serve$/m);
      assert.match(unit, /^KillSignal=SIGTERM$/m);
      const stop = Number(/^TimeoutStopSec=(\d+)$/m.exec(unit)?.[1]);
      assert.ok(stop * 1000 > SHUTDOWN_DEADLINE_MS, `TimeoutStopSec=${stop} does not cover the node's drain`);
      assert.match(unit, /^User=orbit$/m);
    });
  });

  describe("Dockerfile", () => {
    const steps = instructions(read("Dockerfile"));
    const pkg = JSON.parse(read("package.json")) as { bin: Record<string, string>; scripts: Record<string, string> };

    it("copies only files a clone has, and leaves out what was installed or built here", async () => {
      const { stdout } = await run("git", ["ls-files"], { cwd: ROOT, maxBuffer: 16 << 20 });
      const tracked = new Set(stdout.split("\n"));
      const copies = steps.filter((s) => s.op === "COPY" && !s.args.startsWith("--from"));
      assert.ok(copies.length >= 3);
      for (const c of copies) {
        for (const source of c.args.split(/\s+/).slice(0, -1)) {
          assert.ok(source === "." || tracked.has(source), `COPY ${source}: not in the repository`);
        }
      }
      const ignored = read(".dockerignore").split("\n");
      for (const p of [".git", "**/node_modules", "**/dist"])
        assert.ok(ignored.includes(p), `.dockerignore lacks ${p}`);
    });

    it("builds with the package's own scripts and installs the packed server with production dependencies only", () => {
      const runs = steps.filter((s) => s.op === "RUN").map((s) => s.args);
      assert.deepEqual(runs, [
        "npm ci --no-audit --no-fund",
        "npm run build:server && mkdir /pkg && npm pack --ignore-scripts --pack-destination /pkg",
        "npm install --global --omit=dev --no-audit --no-fund /tmp/pkg/*.tgz && rm -rf /tmp/pkg /root/.npm",
      ]);
      assert.ok(pkg.scripts["build:server"], "package.json has no build:server script");
      assert.ok(pkg.bin.orbit && existsSync(path.join(ROOT, pkg.bin.orbit)), "the `orbit` bin is not built");
      assert.deepEqual(steps.at(-1), { op: "CMD", args: '["orbit", "serve"]' });
      const froms = steps.filter((s) => s.op === "FROM").map((s) => s.args);
      assert.equal(froms.length, 2, "a build stage and a runtime stage");
      const engines = (JSON.parse(read("package.json")) as { engines: { node: string } }).engines.node;
      for (const f of froms) assert.match(f, /^node:20-/, `${f} against engines ${engines}`);
    });

    it("runs as a user that is not root, listening where a container is reached", () => {
      const users = steps.filter((s) => s.op === "USER").map((s) => s.args);
      assert.deepEqual(users, ["node"]);
      const env = steps.find((s) => s.op === "ENV")!.args;
      assert.match(env, /ORBIT_HOST=0\.0\.0\.0/);
      assert.match(env, /ORBIT_PORT=8080/);
      assert.deepEqual(
        steps.filter((s) => s.op === "EXPOSE").map((s) => s.args),
        ["8080"],
      );
    });

    describe("its health check, run against a real node", () => {
      let db: TestDatabase;
      let node: OrbitNode;
      before(async () => {
        db = await freshDatabase("recipes");
        node = await startNode(db.url);
      });
      after(() => node?.stop());

      const healthcheck = () => {
        const args = steps.find((s) => s.op === "HEALTHCHECK")!.args;
        const exec = JSON.parse(args.slice(args.indexOf("CMD [") + 4)) as string[];
        assert.equal(exec[0], "node");
        return exec;
      };

      it("exits 0 while the node is up, 1 when nothing answers", async () => {
        const [, ...args] = healthcheck();
        const at = (port: number) => args.map((a) => a.replace("127.0.0.1:8080", `127.0.0.1:${port}`));
        await run(process.execPath, at(node.port), { timeout: 10000 });
        const stopped = node.port;
        await node.stop();
        await assert.rejects(
          run(process.execPath, at(stopped), { timeout: 10000 }),
          (e: { code?: number }) => e.code === 1,
        );
      });
    });
  });
});

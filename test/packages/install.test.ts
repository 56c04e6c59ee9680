// The two packages leave the repository as a user gets them: each is packed, installed
// into a scratch project of its own with production dependencies only, and run there.
// The server's `orbit` command serves a real node; the SDK runs the README's consumer
// example, as written, against it.
import { strict as assert } from "node:assert";
import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { client } from "../helpers/api.js";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type OrbitNode } from "../helpers/orbit.js";

const run = promisify(execFile);
const ROOT = process.cwd();

/** `npm pack` of a package of this repository into `dest`; the tarball's path. */
async function pack(dest: string, workspace?: string): Promise<string> {
  // The test command has built both packages already: packing runs no build (prepack)
  // that would rewrite the SDK's dist/ under the other test files.
  const args = ["pack", "--json", "--ignore-scripts", "--pack-destination", dest];
  if (workspace) args.push("--workspace", workspace);
  const { stdout } = await run("npm", args, { cwd: ROOT, maxBuffer: 16 << 20 });
  const [info] = JSON.parse(stdout) as { filename: string }[];
  return path.join(dest, info!.filename);
}

/** A scratch project with `tarball` installed as a user would, production dependencies only. */
async function install(dir: string, tarball: string): Promise<void> {
  mkdirSync(dir);
  writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "scratch", private: true, type: "module" }));
  await run("npm", ["install", "--omit=dev", "--no-audit", "--no-fund", "--prefer-offline", tarball], {
    cwd: dir,
    timeout: 240000,
    maxBuffer: 16 << 20,
  });
}

/** Every package installed in a scratch project, by name. */
async function installed(dir: string): Promise<string[]> {
  const { stdout } = await run("npm", ["ls", "--all", "--omit=dev", "--parseable"], { cwd: dir, maxBuffer: 16 << 20 });
  return stdout
    .split("\n")
    .filter((l) => l.includes("node_modules"))
    .map((l) => l.slice(l.lastIndexOf("node_modules/") + "node_modules/".length));
}

/** The README's consumer example, as written in its ```js block. */
function readmeConsumer(): string {
  const readme = readFileSync(path.join(ROOT, "README.md"), "utf8");
  const block = /```js\n([\s\S]*?)```/.exec(readme);
  assert.ok(block, "README.md has a ```js block");
  assert.match(block[1]!, /from "@orbit-events\/sdk"/);
  return block[1]!;
}

describe("the packages, installed from their tarballs", function () {
  this.timeout(600000);
  let scratch: string;
  let sdkApp: string;
  let serverApp: string;
  let db: TestDatabase;
  let node: OrbitNode | undefined;

  before(async () => {
    scratch = mkdtempSync(path.join(tmpdir(), "orbit-packages-"));
    const [sdk, server] = [await pack(scratch, "packages/sdk"), await pack(scratch)];
    sdkApp = path.join(scratch, "sdk-app");
    serverApp = path.join(scratch, "server-app");
    await install(sdkApp, sdk);
    await install(serverApp, server);
    db = await freshDatabase("packages");
  });

  after(async () => {
    await node?.stop();
    rmSync(scratch, { recursive: true, force: true });
  });

  it("the SDK installs without the server's dependencies and exports the contract", async () => {
    const names = await installed(sdkApp);
    assert.ok(names.includes("@orbit-events/sdk"), names.join(", "));
    assert.ok(names.includes("ws"));
    for (const serverOnly of ["koa", "@koa/router", "mysql2", "prom-client"]) {
      assert.ok(!names.includes(serverOnly), `${serverOnly} installed with the SDK`);
    }
    const { stdout } = await run(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        [
          'import { createRequire } from "node:module";',
          'import * as sdk from "@orbit-events/sdk";',
          'import schema from "@orbit-events/sdk/events.schema.json" with { type: "json" };',
          "const require = createRequire(import.meta.url);",
          "console.log(JSON.stringify({",
          "  exports: Object.keys(sdk).sort(),",
          "  id: schema.$id,",
          '  openapi: require.resolve("@orbit-events/sdk/openapi.yaml"),',
          '  asyncapi: require.resolve("@orbit-events/sdk/asyncapi.yaml"),',
          "}));",
        ].join("\n"),
      ],
      { cwd: sdkApp },
    );
    const got = JSON.parse(stdout) as { exports: string[]; id: string; openapi: string; asyncapi: string };
    for (const name of ["OrbitClient", "EventConnection", "Consumer", "Worker", "OrbitApiError", "RawJson"]) {
      assert.ok(got.exports.includes(name), `${name} is not exported: ${got.exports.join(", ")}`);
    }
    assert.equal(got.id, JSON.parse(readFileSync(path.join(ROOT, "events.schema.json"), "utf8")).$id);
    assert.equal(readFileSync(got.openapi, "utf8"), readFileSync(path.join(ROOT, "openapi.yaml"), "utf8"));
    assert.ok(existsSync(got.asyncapi));
    // Internal files stay behind the exports map.
    await assert.rejects(
      run(process.execPath, ["--input-type=module", "-e", 'await import("@orbit-events/sdk/dist/src/sdk/client.js")'], {
        cwd: sdkApp,
      }),
      /ERR_PACKAGE_PATH_NOT_EXPORTED/,
    );
  });

  it("the server's `orbit` command serves, and the README's consumer gets a result through the SDK", async () => {
    const orbit = path.join(serverApp, "node_modules", ".bin", "orbit");
    const boot = await bootstrap(
      db.url,
      { namespace: "demo", application: "shop", queues: ["orders"], eventAccess: true },
      orbit,
    );
    node = await startNode(db.url, {}, [], orbit);
    const api = client(node.url, boot.token);
    const queueId = boot.queues[0]!.id;

    const submitted = await api.post("/v1/tasks", { queue_id: queueId, input: { order: 1001 } });
    assert.equal(submitted.status, 201, JSON.stringify(submitted.json));
    const claim = await api.post("/v1/worker/claim", { queue_id: queueId, wait_ms: 5000 }, null);
    assert.equal(claim.status, 200, JSON.stringify(claim.json));
    const done = await api.post(
      `/v1/worker/attempts/${claim.json.data.attempt_id}:complete`,
      '{"outcome":"succeeded","result":{"invoice":12345678901234567890}}',
      null,
    );
    assert.equal(done.status, 200, JSON.stringify(done.json));
    const sub = await api.post("/v1/subscriptions", { name: "order-results", queue_id: queueId, from_sequence: "0" });
    assert.equal(sub.status, 201, JSON.stringify(sub.json));
    const subscriptionId = sub.json.data.subscription.id as string;

    writeFileSync(path.join(sdkApp, "consume.mjs"), readmeConsumer());
    const consumer = spawn(process.execPath, ["consume.mjs"], {
      cwd: sdkApp,
      env: { ...process.env, ORBIT_URL: node.url, ORBIT_TOKEN: boot.token, S: subscriptionId },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    consumer.stdout.on("data", (d) => (out += d));
    consumer.stderr.on("data", (d) => (out += d));
    const exited = once(consumer, "exit");
    try {
      for (const end = Date.now() + 30000; !out.includes("\n");) {
        assert.ok(Date.now() < end, `no result printed: ${out}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.equal(out, '1 task.succeeded {"invoice":12345678901234567890}\n');
      // Printed, then ACKed: nothing stays pending once the SDK confirmed it.
      for (const end = Date.now() + 15000; ;) {
        const read = await api.get(`/v1/subscriptions/${subscriptionId}`);
        if (read.json.data.pending_count === 0) break;
        assert.ok(Date.now() < end, `still pending: ${JSON.stringify(read.json)}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      consumer.kill("SIGINT");
      const [code] = await exited;
      assert.equal(code, 0, out);
      assert.match(out, /\{ stopped: true \}\n$/);
    } finally {
      consumer.kill("SIGKILL");
    }
  });
});

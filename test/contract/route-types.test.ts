// The generated Implementation type is a compile-time contract: a missing handler, or a
// handler answering a shape or status the contract does not allow, fails to compile.
import { strict as assert } from "node:assert";
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import path from "node:path";

const root = process.cwd();

function tsc(file: string): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [
        path.join(root, "node_modules/typescript/bin/tsc"),
        "--noEmit",
        "--strict",
        "--exactOptionalPropertyTypes",
        "--module",
        "nodenext",
        "--moduleResolution",
        "nodenext",
        "--target",
        "es2022",
        "--skipLibCheck",
        "--types",
        "node",
        file,
      ],
      { cwd: root },
      (err, stdout, stderr) => resolve({ code: err ? Number(err.code ?? 1) : 0, out: stdout + stderr }),
    );
  });
}

const HEADER = `import type { Implementation, Handler } from "${root}/generated/http/routes.js";\n`;

describe("generated route types", function () {
  this.timeout(120000);
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(root, "dist", "route-types-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function compile(name: string, body: string) {
    const file = path.join(dir, `${name}.ts`);
    await writeFile(file, HEADER + body);
    return tsc(file);
  }

  it("accepts a well-typed handler and rejects a wrong shape, a wrong status and a missing handler", async () => {
    const good = await compile(
      "good",
      `export const h: Handler<"getHealth", unknown> = async () => ({ status: 200, data: { status: "ok" } });\n`,
    );
    assert.equal(good.code, 0, good.out);

    const wrongShape = await compile(
      "wrong_shape",
      `export const h: Handler<"getHealth", unknown> = async () => ({ status: 200, data: { state: "ok" } });\n`,
    );
    assert.notEqual(wrongShape.code, 0);
    assert.match(wrongShape.out, /error TS/);

    const wrongStatus = await compile(
      "wrong_status",
      `export const h: Handler<"getHealth", unknown> = async () => ({ status: 201, data: { status: "ok" } });\n`,
    );
    assert.notEqual(wrongStatus.code, 0);

    const missing = await compile(
      "missing",
      `declare const any: any;\nexport const impl: Omit<Implementation<unknown>, never> = { getHealth: any } ;\n`,
    );
    assert.notEqual(missing.code, 0);
    assert.match(missing.out, /missing the following properties|is missing in type/);
  });
});

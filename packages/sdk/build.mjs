// Builds the SDK package from the repository's sources: the SDK (src/sdk/) and only what
// it imports (the generated frame types and validators, two wire helpers) into dist/,
// then the contract and the licence beside it, so the package stands alone.
// Run by `npm run build` at the repository root and by `npm pack` (prepack).
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");

// A stale file from an earlier build would otherwise ship.
for (const dir of ["dist", "contract"]) rmSync(path.join(here, dir), { recursive: true, force: true });

const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
execFileSync(process.execPath, [tsc, "-p", path.join(here, "tsconfig.json")], { stdio: "inherit" });

mkdirSync(path.join(here, "contract"));
for (const [from, to] of [
  ["openapi.yaml", "contract/openapi.yaml"],
  ["events.schema.json", "contract/events.schema.json"],
  ["generated/asyncapi.yaml", "contract/asyncapi.yaml"],
  ["LICENSE", "LICENSE"],
]) {
  cpSync(path.join(repo, from), path.join(here, to));
}

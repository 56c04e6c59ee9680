// Where the team's specification lives: beside the project (../shared/spec, as CI lays it
// out), or where ORBIT_SPEC_DIR points, or the workplace's own copy (/work/shared/spec) for
// a clone made anywhere else on the machine.
import { existsSync } from "node:fs";
import { resolve } from "node:path";

const CANDIDATES = [process.env.ORBIT_SPEC_DIR, resolve(process.cwd(), "../shared/spec"), "/work/shared/spec"];

/** The path of a spec file, e.g. specPath("subscriptions.md"); the first candidate that has it. */
export function specPath(file: string): string {
  for (const dir of CANDIDATES) if (dir && existsSync(resolve(dir, file))) return resolve(dir, file);
  return resolve(process.cwd(), "../shared/spec", file); // not found: the read fails and says where
}

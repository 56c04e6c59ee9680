// The repository stands alone: a clone on a machine with nothing beside it builds, tests
// and reads complete. No file may point outside it or speak of the work sessions that
// built it; the README stays a short guide.
import { strict as assert } from "node:assert";
import { readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";

const ROOT = process.cwd();
const SKIP = new Set([".git", "node_modules", "dist", ".bench-tmp"]);
const TEXT = /\.(ts|mjs|js|json|ya?ml|md|sql|sh|txt)$|^(run|Dockerfile|\.gitattributes|\.gitignore)$/;

// Built from parts so that this file does not match itself.
const OUTSIDE = new RegExp(
  [
    "\\.\\./" + "shared",
    "/work/" + "shared",
    "perf-" + "notes",
    "style " + "habit",
    "subscriptions" + "\\.md",
    "platform" + "\\.md",
    "spec " + "§",
    "[Dd]ecision" + " [0-9]",
  ].join("|"),
);
const WORK_SESSION = new RegExp("\\b[Ss]ession" + "s? [0-9]+\\b");

function* files(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    if (SKIP.has(name)) continue;
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) yield* files(full);
    else if (TEXT.test(name)) yield full;
  }
}

function hits(pattern: RegExp): string[] {
  const found: string[] = [];
  for (const file of files(ROOT)) {
    readFileSync(file, "utf8")
      .split("\n")
      .forEach((line, i) => {
        if (pattern.test(line)) found.push(`${path.relative(ROOT, file)}:${i + 1}: ${line.trim().slice(0, 120)}`);
      });
  }
  return found;
}

describe("the repository stands alone", () => {
  it("cites no file outside it", () => {
    assert.deepStrictEqual(hits(OUTSIDE), []);
  });

  it("speaks of no work session (history lives in commit messages)", () => {
    assert.deepStrictEqual(hits(WORK_SESSION), []);
  });

  it("keeps the README a short guide (the reference is in docs/)", () => {
    const lines = readFileSync(path.join(ROOT, "README.md"), "utf8").split("\n").length;
    assert.ok(lines <= 210, `README.md has ${lines} lines`);
  });
});

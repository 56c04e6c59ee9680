// The source layers hold as drawn: every relative import and export-from under src/ is
// read from the TypeScript sources (not the build), resolved, and checked against the
// import direction below; and no source file grows past MAX_LINES.
//
//   cli ──► app/server ──► http ─┐
//                          ws  ──┼──► domain ──► db
//                                │       │
//   sdk ─────────────────────────┴───────┴──► wire   (generated/ is used by http, ws, sdk)
//
// http and ws share what both need through a module of their own (edge, domain, wire),
// never through each other.
import { strict as assert } from "node:assert";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root, from dist/test/unit/ (compiled) or test/unit/ (sources). */
const ROOT = (() => {
  const here = dirname(fileURLToPath(import.meta.url));
  const up = here.split(sep).includes("dist") ? "../../.." : "../..";
  return resolve(here, up);
})();
const SRC = join(ROOT, "src");

/** A file longer than this does more than one job: split it. */
const MAX_LINES = 400;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path);
    return e.name.endsWith(".ts") ? [path] : [];
  });
}

/**
 * The module specifiers of a file's static imports, export-froms and dynamic imports,
 * `import("…")` type queries included. Comments are blanked first, so that an example
 * in a comment is not read as an import.
 */
function specifiers(text: string): string[] {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, " ").replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
  const found: string[] = [];
  const patterns = [
    /\b(?:import|export)\s+(?:type\s+)?(?:[\w*{}\s,$]+?\s+from\s+)?["']([^"']+)["']/g,
    /\bimport\s*\(\s*["']([^"']+)["']\s*\)/g,
  ];
  for (const re of patterns) for (const m of code.matchAll(re)) found.push(m[1]!);
  return found;
}

/** Where a file sits: its folder under src/ (`http`, `ws`, …), or `generated` outside it. */
function layerOf(path: string): string {
  const rel = relative(ROOT, path).split(sep);
  if (rel[0] === "generated") return "generated";
  if (rel[0] !== "src") return rel[0] ?? "";
  return rel.length > 2 ? rel[1]! : rel[1]!.replace(/\.ts$/, "");
}

/**
 * The layers each layer must not import; `only` lists, for the strictest, all it may. The
 * SDK ships to clients without the server, and the server never builds on the client.
 */
const RULES: Readonly<Record<string, { only?: readonly string[]; never?: readonly string[] }>> = {
  wire: { only: ["wire", "generated"] },
  sdk: { only: ["sdk", "wire", "generated"] },
  http: { never: ["ws", "sdk"] },
  ws: { never: ["http", "sdk"] },
  edge: { never: ["http", "ws", "sdk"] },
  domain: { never: ["http", "ws", "edge", "sdk"] },
  db: { never: ["domain", "http", "ws", "edge", "sdk"] },
};

interface Edge {
  readonly from: string;
  readonly spec: string;
  readonly to: string;
}

function edges(): Edge[] {
  return sourceFiles(SRC).flatMap((file) =>
    specifiers(readFileSync(file, "utf8"))
      .filter((spec) => spec.startsWith("."))
      .map((spec) => ({ from: file, spec, to: resolve(dirname(file), spec).replace(/\.js$/, ".ts") })),
  );
}

/** Every import that breaks a rule, as "src/wire/ids.ts imports ../sdk/random-hex.js (sdk)". */
function violations(all: readonly Edge[]): string[] {
  const found: string[] = [];
  for (const e of all) {
    const from = layerOf(e.from);
    const to = layerOf(e.to);
    const rule = RULES[from];
    if (!rule || from === to) continue;
    const broken = rule.only ? !rule.only.includes(to) : rule.never!.includes(to);
    if (broken) found.push(`${relative(ROOT, e.from)} imports ${e.spec} (${to}): ${from} may not import ${to}`);
  }
  return found;
}

describe("source layers", () => {
  const all = edges();

  it("finds the imports of the sources", () => {
    assert.ok(sourceFiles(SRC).length > 50, `no sources under ${SRC}`);
    assert.ok(all.length > 100);
    assert.deepEqual(
      specifiers('import a from "./a.js";\nexport { b } from "../b.js";\nimport type { C } from "./c.js";'),
      ["./a.js", "../b.js", "./c.js"],
    );
    assert.deepEqual(specifiers('// import x from "./not.js"\nconst t = import("./lazy.js");'), ["./lazy.js"]);
  });

  it("every relative import names a source file that exists", () => {
    const files = new Set(sourceFiles(SRC));
    const generated = join(ROOT, "generated");
    const missing = all
      .filter((e) => !files.has(e.to) && !e.to.startsWith(generated + sep))
      .map((e) => `${relative(ROOT, e.from)} imports ${e.spec}`);
    assert.deepEqual(missing, [], `imports of files that are not under src/:\n${missing.join("\n")}`);
  });

  it("imports go down the layers only", () => {
    const bad = violations(all);
    assert.deepEqual(bad, [], `imports against the layering:\n${bad.join("\n")}`);
  });

  it("a rule broken is named with its file and import", () => {
    const bad = violations([
      { from: join(SRC, "wire", "ids.ts"), spec: "../sdk/random-hex.js", to: join(SRC, "sdk", "random-hex.ts") },
    ]);
    assert.deepEqual(bad, ["src/wire/ids.ts imports ../sdk/random-hex.js (sdk): wire may not import sdk"]);
  });

  it(`no file under src/ is longer than ${MAX_LINES} lines`, () => {
    const long = sourceFiles(SRC)
      .map((f) => ({ f, lines: readFileSync(f, "utf8").split("\n").length - 1 }))
      .filter((x) => x.lines > MAX_LINES)
      .map((x) => `${relative(ROOT, x.f)}: ${x.lines} lines`);
    assert.deepEqual(long, [], `files above ${MAX_LINES} lines:\n${long.join("\n")}`);
  });
});

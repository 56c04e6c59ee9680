// node dist/bench/ab.js --a DIR --b DIR [--rounds 4] [--only orbit.drain]: two builds
// judged the way bench/README.md asks — quick runs of the same measurements alternating A,
// B, A, B … within the same minutes, since this machine kind's speed swings over minutes by more
// than most changes move a figure. Each DIR is a built checkout (a `git
// worktree` of the build to compare, `npm ci && npm run build`). Each run's JSON is copied
// into a fresh temporary directory and the checkout's bench/results/latest.json put back
// as it was (so any build can be compared, also one older than this tool); the table gives
// every run's figures, then each side's mean and in how many rounds B was ahead. A
// benchmark tool: it fails only when a run fails.
import { execFile } from "node:child_process";
import { copyFile, mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs, promisify } from "node:util";

const { values } = parseArgs({
  options: {
    a: { type: "string" },
    b: { type: "string" },
    rounds: { type: "string", default: "4" },
    only: { type: "string", default: "orbit.drain" },
  },
  strict: true,
});
const rounds = Number(values.rounds);
if (!values.a || !values.b || !Number.isInteger(rounds) || rounds < 1) {
  process.stderr.write(
    "usage: node dist/bench/ab.js --a DIR --b DIR [--rounds N] [--only orbit.drain,orbit.append,…]\n",
  );
  process.exit(2);
}
const sides = { A: resolve(values.a), B: resolve(values.b) } as const;

/**
 * The figures worth comparing, where a run has them: a measurement (a top-level key of
 * latest.json, itself dotted) and the path within it; higher is better unless `lower`.
 */
const FIGURES: readonly { label: string; key: string; path: string; lower?: boolean }[] = [
  { label: "drain 1 sub /s", key: "orbit.drain", path: "oneSubscription.deliveriesPerSec" },
  { label: "drain 1 sub: node CPU s", key: "orbit.drain", path: "oneSubscription.cpu.node", lower: true },
  { label: "drain 1 sub: MariaDB CPU s", key: "orbit.drain", path: "oneSubscription.cpu.mariadb", lower: true },
  { label: "drain 16 subs /s", key: "orbit.drain", path: "sixteenSubscriptions.deliveriesPerSec" },
  { label: "append /s", key: "orbit.append", path: "resultsPerSec" },
  { label: "append: node CPU s", key: "orbit.append", path: "cpu.node", lower: true },
  { label: "append: MariaDB CPU s", key: "orbit.append", path: "cpu.mariadb", lower: true },
  { label: "submit→claim→complete /s", key: "orbit.append", path: "submitClaimCompletePerSec" },
  { label: "claim of 32 alone, ms", key: "orbit.claim", path: "meanMs", lower: true },
  { label: "latency same p50 ms", key: "orbit.latency.same", path: "sameNode.p50Ms", lower: true },
  { label: "latency same p99 ms", key: "orbit.latency.same", path: "sameNode.p99Ms", lower: true },
  { label: "latency other p50 ms", key: "orbit.latency.other", path: "otherNode.p50Ms", lower: true },
  { label: "latency other p99 ms", key: "orbit.latency.other", path: "otherNode.p99Ms", lower: true },
  { label: "pipeline tasks/s", key: "orbit.pipeline", path: "tasksPerSec" },
  { label: "pipeline: node CPU s", key: "orbit.pipeline", path: "cpu.node", lower: true },
  { label: "pipeline: MariaDB CPU s", key: "orbit.pipeline", path: "cpu.mariadb", lower: true },
  { label: "pipeline: statements/task", key: "orbit.pipeline", path: "databasePerTask.Questions", lower: true },
  { label: "pipeline: round trips/task", key: "orbit.pipeline", path: "databasePerTask.roundTrips", lower: true },
  { label: "pipeline.http tasks/s", key: "orbit.pipeline.http", path: "tasksPerSec" },
  { label: "pipeline.http: node CPU s", key: "orbit.pipeline.http", path: "cpu.node", lower: true },
  { label: "pipeline.http: MariaDB CPU s", key: "orbit.pipeline.http", path: "cpu.mariadb", lower: true },
  { label: "graphile-worker jobs/s", key: "peer.graphile-worker", path: "jobsPerSec" },
  { label: "pipeline latency same p99 ms", key: "orbit.pipeline.latency", path: "sameNode.p99Ms", lower: true },
  {
    label: "pipeline latency same: statements/task",
    key: "orbit.pipeline.latency",
    path: "sameNode.databasePerTask.Questions",
    lower: true,
  },
  {
    label: "pipeline latency same: CPU ms/task",
    key: "orbit.pipeline.latency",
    path: "sameNode.cpuMsPerTask.all",
    lower: true,
  },
  { label: "db.commit /s", key: "db.commit", path: "commitsPerSec" },
];

function at(json: unknown, key: string, path: string): number | undefined {
  const v = [key, ...path.split(".")].reduce<unknown>(
    (o, k) => (o && typeof o === "object" ? (o as Record<string, unknown>)[k] : undefined),
    json,
  );
  return typeof v === "number" && Number.isFinite(v) ? v : undefined;
}

// Runs one after another, never at once: they would share the two cores.
const run = promisify(execFile);
const dir = await mkdtemp(join(tmpdir(), "orbit-ab-"));
const seen: Record<"A" | "B", (number | undefined)[][]> = { A: [], B: [] };
const fmt = (x: number | undefined) =>
  x === undefined ? "—" : x >= 100 ? Math.round(x).toLocaleString("en") : x.toFixed(2);

for (let r = 1; r <= rounds; r++) {
  for (const side of ["A", "B"] as const) {
    const out = join(dir, `${side}-${r}.json`);
    const latest = join(sides[side], "bench/results/latest.json");
    const committed = await readFile(latest);
    try {
      await run(process.execPath, ["dist/bench/run.js", "--quick", "--only", values.only!], {
        cwd: sides[side],
        maxBuffer: 1 << 24,
      });
      await copyFile(latest, out);
    } finally {
      await writeFile(latest, committed);
    }
    const json = JSON.parse(await readFile(out, "utf8")) as unknown;
    const row = FIGURES.map((f) => at(json, f.key, f.path));
    seen[side].push(row);
    const shown = FIGURES.flatMap((f, i) => (row[i] === undefined ? [] : [`${f.label} ${fmt(row[i])}`]));
    process.stdout.write(`${side} ${r}  ${shown.join("  ")}\n`);
  }
}

process.stdout.write(`\n${rounds} alternating rounds (runs in ${dir}); A = ${sides.A}, B = ${sides.B}\n`);
FIGURES.forEach((f, i) => {
  const a = seen.A.map((row) => row[i]);
  const b = seen.B.map((row) => row[i]);
  if (a.some((x) => x === undefined) || b.some((x) => x === undefined)) return;
  const mean = (xs: (number | undefined)[]) => xs.reduce<number>((s, x) => s + x!, 0) / xs.length;
  const ahead = b.filter((x, k) => (f.lower ? x! < a[k]! : x! > a[k]!)).length;
  const change = ((mean(b) / mean(a) - 1) * 100).toFixed(1);
  process.stdout.write(
    `  ${f.label.padEnd(28)} A ${fmt(mean(a)).padStart(8)}  B ${fmt(mean(b)).padStart(8)}  (${Number(change) >= 0 ? "+" : ""}${change} %, B better in ${ahead} of ${rounds})\n`,
  );
});

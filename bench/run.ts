// npm run bench [-- --quick]: every figure of bench/README.md in one run, side by side — the
// database's own limits, a peer broker, and Orbit — then the ratios against the goals.
// Prints a table and writes bench/results/latest.json. A benchmark, not a test: it never
// fails on timing (only on errors).
import { mkdir, writeFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { measureDbCommit, measureDbCycle8 } from "./db.js";
import { measureGraphileWorker } from "./graphile.js";
import { measureHttpFloor } from "./http-floor.js";
import { measureJetStream } from "./jetstream.js";
import {
  measureAppend,
  measureClaimFloor,
  measureDrain,
  measureIdle,
  measureLatency,
  measureScaling,
} from "./orbit.js";
import { measurePipelineHttp, measurePipelineLatency } from "./pipeline.js";

const { values } = parseArgs({ options: { quick: { type: "boolean" }, only: { type: "string" } }, strict: true });
const o = { quick: values.quick === true, mysqlUrl: process.env.ORBIT_BENCH_MYSQL ?? "mysql://root@127.0.0.1:3306" };
const only = values.only?.split(",");
const want = (name: string) => !only || only.includes(name);

const log = (s: string) => process.stderr.write(`bench: ${s}\n`);
const results: Record<string, unknown> = { quick: o.quick, at: new Date().toISOString() };
const started = Date.now();

async function step<T>(name: string, fn: () => Promise<T>): Promise<T | undefined> {
  if (!want(name)) return undefined;
  log(`${name} …`);
  const r = await fn();
  results[name] = r;
  log(`${name} done`);
  return r;
}

const commit = await step("db.commit", () => measureDbCommit(o));
const cycle8 = await step("db.cycle8", () => measureDbCycle8(o));
// What one HTTP request per result leaves of db.commit on this machine (append's bound).
const httpFloor = await step("floor.http", () => measureHttpFloor(o));
const jet = await step("peer.jetstream", () => measureJetStream(o));
const append = await step("orbit.append", () => measureAppend(o));
const drain = await step("orbit.drain", () => measureDrain(o));
const scaling = await step("orbit.scaling", () => measureScaling(o));
const claimFloor = await step("orbit.claim", () => measureClaimFloor(o));
// The goals' two latency topologies, each in a run of its own (the goals), then both at once: on
// this one machine the other node's deliveries take cores from the same node's.
const latencySame = await step("orbit.latency.same", () => measureLatency(o, 500, ["same"]));
const latencyOther = await step("orbit.latency.other", () => measureLatency(o, 500, ["other"]));
const latency = await step("orbit.latency", () => measureLatency(o));
// Below the machine's capacity: 500/s with two consumers at once is at the edge of what a
// 2-core machine of this kind keeps up with; this point shows the latency below it.
const latencyHalf = await step("orbit.latency.250", () => measureLatency(o, 250));
const idle = await step("orbit.idle", () => measureIdle(o));
const pipeline = await step("orbit.pipeline.http", () => measurePipelineHttp(o));
const graphile = await step("peer.graphile-worker", () => measureGraphileWorker(o));
void graphile;
const pipelineLatency = await step("orbit.pipeline.latency", () =>
  measurePipelineLatency(o, Math.round((pipeline?.tasksPerSec ?? 400) / 2)),
);
void pipelineLatency;

const num = (x: unknown): number | undefined => (typeof x === "number" && Number.isFinite(x) ? x : undefined);
const commitRate = num((commit as { commitsPerSec?: number } | undefined)?.commitsPerSec);
const cycleRate = num((cycle8 as { deliveriesPerSec?: number } | undefined)?.deliveriesPerSec);
const jetRate = num((jet as { messagesPerSec?: number } | undefined)?.messagesPerSec);
const drainRate = num(drain?.oneSubscription.deliveriesPerSec);
const ratio = (a?: number, b?: number) => (a !== undefined && b !== undefined && b > 0 ? a / b : undefined);
const ratios = {
  "orbit.drain / peer.jetstream": { value: ratio(drainRate, jetRate), goal: ">= 1.0" },
  "orbit.drain / db.cycle8": { value: ratio(drainRate, cycleRate), goal: ">= 0.6" },
  "orbit.append / db.commit": { value: ratio(num(append?.resultsPerSec), commitRate), goal: ">= 0.5" },
};
results.ratios = ratios;
// Not goals: where the append goal stands against one HTTP request and one commit per result here.
const floorRate = num(httpFloor?.withCommit.requestsPerSec);
const bounds = {
  "floor.http / db.commit": ratio(floorRate, commitRate),
  "orbit.append / floor.http": ratio(num(append?.resultsPerSec), floorRate),
};
results.bounds = bounds;
results.goals = {
  "latency p99 same node (ms)": { value: latencySame?.sameNode?.p99Ms, goal: "<= 50" },
  "latency p99 other node (ms)": { value: latencyOther?.otherNode?.p99Ms, goal: "<= 1000" },
  "latency p99 same node, both consumers at once (ms)": { value: latency?.sameNode?.p99Ms, goal: "(not a goal)" },
  "latency p99 other node, both consumers at once (ms)": { value: latency?.otherNode?.p99Ms, goal: "(not a goal)" },
  "idle queries/s per connection": { value: idle?.queriesPerSecPerConnection, goal: "<= 1" },
  "idle node RSS (MiB)": { value: idle?.nodeRssMiB, goal: "<= 150" },
};
results.seconds = (Date.now() - started) / 1000;

const f = (x: unknown, digits = 0) => (typeof x === "number" && Number.isFinite(x) ? x.toFixed(digits) : "—");
const rows: [string, string, string][] = [
  ["db.commit (16 conns)", `${f(commitRate)} commits/s`, ""],
  ["db.cycle8 (16 conns, 8 per tx)", `${f(cycleRate)} deliveries/s`, ""],
  [
    "floor.http (16 workers, 1 commit each)",
    `${f(floorRate)} requests/s`,
    `answer only ${f(httpFloor?.answerOnly.requestsPerSec)}/s; ${cpuLine(httpFloor?.withCommit.cpu)}`,
  ],
  ["peer.jetstream (20k, 64 in flight)", jetRate === undefined ? `skipped` : `${f(jetRate)} msgs/s`, ""],
  [
    "orbit.append (16 workers, complete only)",
    `${f(append?.resultsPerSec)} results/s`,
    `submit→claim→complete ${f(append?.submitClaimCompletePerSec)}/s`,
  ],
  [
    "orbit.drain (1 sub, 4 × 32)",
    `${f(drainRate)} deliveries/s`,
    `${cpuLine(drain?.oneSubscription.cpu)}; ${claimLine(drain?.oneSubscription.claims)}`,
  ],
  [
    "orbit.drain (16 subs × 1)",
    `${f(drain?.sixteenSubscriptions.deliveriesPerSec)} deliveries/s`,
    `${cpuLine(drain?.sixteenSubscriptions.cpu)}; ${claimLine(drain?.sixteenSubscriptions.claims)}`,
  ],
  [
    "orbit.latency same node (alone)",
    latencyLine(latencySame?.sameNode),
    `${latencySame?.ratePerSec ?? ""}/s for ${latencySame?.seconds ?? ""} s after ${latencySame?.warmupSeconds ?? ""} s (achieved ${latencySame?.achievedPerSec ?? ""}/s); ${cpuLine(latencySame?.cpu)}`,
  ],
  [
    "orbit.latency other node (alone)",
    latencyLine(latencyOther?.otherNode),
    `achieved ${latencyOther?.achievedPerSec ?? ""}/s; ${cpuLine(latencyOther?.cpu)}`,
  ],
  [
    "orbit.latency same node (both at once)",
    latencyLine(latency?.sameNode),
    `achieved ${latency?.achievedPerSec ?? ""}/s`,
  ],
  ["orbit.latency other node (both at once)", latencyLine(latency?.otherNode), cpuLine(latency?.cpu)],
  [
    "orbit.latency same node @250/s (both)",
    latencyLine(latencyHalf?.sameNode),
    `achieved ${latencyHalf?.achievedPerSec ?? ""}/s`,
  ],
  ["orbit.latency other node @250/s (both)", latencyLine(latencyHalf?.otherNode), cpuLine(latencyHalf?.cpu)],
  [
    "orbit.idle (128 connections)",
    `${f(idle?.queriesPerSecPerConnection, 2)} queries/s each`,
    `node RSS ${f(idle?.nodeRssMiB)} MiB`,
  ],
];
for (const p of scaling?.points ?? []) {
  rows.push([
    `orbit.scaling ${p.consumers} × capacity ${p.capacity}`,
    `${f(p.deliveriesPerSec)} deliveries/s`,
    `${f(p.claims.meanLeases, 1)} per claim, ${f(p.claims.meanMs, 1)} ms each`,
  ]);
}
if (claimFloor) {
  rows.push([
    "orbit.claim (4 × 8, idle machine)",
    `${f(claimFloor.meanMs, 1)} ms per claim of 32`,
    `p50 ${f(claimFloor.p50Ms, 1)}, p90 ${f(claimFloor.p90Ms, 1)} ms; ceiling of a 4-connection drain ${f(claimFloor.drainCeilingPerSec)}/s; materialising 1,000: ${f(claimFloor.materialisingClaimMs)} ms`,
  ]);
}
for (const [name, r] of Object.entries(ratios)) rows.push([name, f(r.value, 2), `goal ${r.goal}`]);
for (const [name, v] of Object.entries(bounds)) rows.push([name, f(v, 2), "(bound, not a goal)"]);
const w = [Math.max(...rows.map((r) => r[0].length)), Math.max(...rows.map((r) => r[1].length))];
process.stdout.write(`\nOrbit benchmark (${o.quick ? "quick" : "full"}, ${f(results.seconds)} s)\n`);
for (const [a, b, c] of rows) process.stdout.write(`  ${a.padEnd(w[0]!)}  ${b.padEnd(w[1]!)}  ${c}\n`);

function latencyLine(l?: { p50Ms: number; p99Ms: number }): string {
  return `p50 ${f(l?.p50Ms)} ms, p99 ${f(l?.p99Ms)} ms`;
}

function claimLine(c?: { meanLeases: number; meanMs: number }): string {
  return c ? `${f(c.meanLeases, 1)} per claim, ${f(c.meanMs, 1)} ms each` : "";
}

function cpuLine(cpu?: Record<string, number>): string {
  if (!cpu) return "";
  return `CPU s: ${Object.entries(cpu)
    .filter(([k]) => k !== "wall")
    .map(([k, v]) => `${k} ${f(v, 1)}`)
    .join(", ")} in ${f(cpu.wall, 1)} s`;
}

await mkdir("bench/results", { recursive: true });
await writeFile("bench/results/latest.json", JSON.stringify(results, null, 2) + "\n");
process.stdout.write("\nwritten: bench/results/latest.json\n");

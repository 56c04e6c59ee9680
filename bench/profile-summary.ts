// Summarises a .cpuprofile (from ORBIT_BENCH_PROFILE_DIR or --cpu-prof): the busy share
// of each function by self time and by inclusive time (a function counted once per
// sample however deep it recurs). `node dist/bench/profile-summary.js FILE [TOP]`.
import { readFileSync } from "node:fs";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const [file, topArg] = process.argv.slice(2);
if (!file) throw new Error("usage: profile-summary FILE [TOP]");
const top = Number(topArg ?? 30);
const p = JSON.parse(readFileSync(file, "utf8")) as Profile;
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const name = (n: ProfileNode) =>
  `${n.callFrame.functionName || "(anonymous)"} ${n.callFrame.url.split("/").slice(-2).join("/")}:${n.callFrame.lineNumber + 1}`;

const time = new Map<number, number>();
p.samples.forEach((id, i) => time.set(id, (time.get(id) ?? 0) + (p.timeDeltas[i] ?? 0)));
const self = new Map<string, number>();
const inclusive = new Map<string, number>();
let busy = 0;
let idle = 0;
for (const [id, t] of time) {
  const n = byId.get(id)!;
  if (n.callFrame.functionName === "(idle)") {
    idle += t;
    continue;
  }
  busy += t;
  self.set(name(n), (self.get(name(n)) ?? 0) + t);
  const seen = new Set<string>();
  for (let x: number | undefined = id; x !== undefined; x = parent.get(x)) seen.add(name(byId.get(x)!));
  for (const k of seen) inclusive.set(k, (inclusive.get(k) ?? 0) + t);
}
const list = (m: Map<string, number>) =>
  [...m]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([k, t]) => `${((100 * t) / busy).toFixed(1).padStart(6)} %  ${k}`)
    .join("\n");
console.log(
  `busy ${(busy / 1e6).toFixed(2)} s, idle ${(idle / 1e6).toFixed(2)} s (wall-time samples: a process preempted counts as busy)`,
);
console.log(`\nself time\n${list(self)}\n\ninclusive time\n${list(inclusive)}`);

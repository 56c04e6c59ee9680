// The chaos run's fault schedule: drawn in full from the seed before the run starts, so
// that a seed names one schedule (which faults, on what, when and for how long), and a
// failing run can be replayed with it. Timing inside the processes still varies between
// runs; the schedule does not.

/** mulberry32: a small, well-mixed 32-bit generator, enough to draw a schedule. */
export function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Node clocks are skewed within ±this: operations.md asks for clocks well under a second apart. */
export const MAX_SKEW_MS = 250;

export type Fault =
  /** SIGKILL a node; it is started again after downMs. */
  | { readonly kind: "kill-node"; readonly target: number; readonly downMs: number; readonly skewMs: number }
  /** SIGSTOP a node for forMs, then SIGCONT. */
  | { readonly kind: "freeze-node"; readonly target: number; readonly forMs: number }
  /** SIGTERM a node (a deploy) and start it again with another clock skew. */
  | { readonly kind: "restart-node"; readonly target: number; readonly skewMs: number }
  | { readonly kind: "kill-consumer"; readonly target: number; readonly downMs: number }
  | { readonly kind: "freeze-consumer"; readonly target: number; readonly forMs: number }
  | { readonly kind: "kill-worker"; readonly target: number; readonly downMs: number }
  /** A node's database connections are dropped, and new ones refused, for forMs. */
  | { readonly kind: "cut-database"; readonly target: number; readonly forMs: number }
  /** A node's database answers are held back for forMs (the statements run). */
  | { readonly kind: "stall-database"; readonly target: number; readonly forMs: number }
  /** The next COMMIT a node sends runs, and its answer never comes: the connection is dropped. */
  | { readonly kind: "lose-commit-answer"; readonly target: number }
  /** SIGKILL the MariaDB server; it is started again after downMs and recovers. */
  | { readonly kind: "crash-database"; readonly downMs: number };

export interface Planned {
  readonly atMs: number;
  readonly fault: Fault;
}

export interface Cast {
  readonly nodes: number;
  readonly consumers: number;
  readonly workers: number;
}

/** How often each kind is drawn, relative to the others. */
const WEIGHTS: readonly [Fault["kind"], number][] = [
  ["kill-node", 3],
  ["freeze-node", 2],
  ["restart-node", 1],
  ["kill-consumer", 3],
  ["freeze-consumer", 2],
  ["kill-worker", 2],
  ["cut-database", 2],
  ["stall-database", 2],
  ["lose-commit-answer", 2],
  ["crash-database", 1],
];

/** A process or link is left alone this long after its fault ends, so that it comes back first. */
const SETTLE_MS = 3000;

/** The faults of a run of durationMs: one every 1-3 s, never two at once on the same target. */
export function plan(seed: number, durationMs: number, cast: Cast): { skews: number[]; faults: Planned[] } {
  const next = random(seed);
  const between = (lo: number, hi: number) => Math.round(lo + next() * (hi - lo));
  const skew = () => between(-MAX_SKEW_MS, MAX_SKEW_MS);
  const skews = Array.from({ length: cast.nodes }, skew);
  const total = WEIGHTS.reduce((s, [, w]) => s + w, 0);
  const busyUntil = new Map<string, number>();
  const faults: Planned[] = [];
  for (let at = between(1000, 3000); at < durationMs; at += between(1000, 3000)) {
    let pick = next() * total;
    const kind = WEIGHTS.find(([, w]) => (pick -= w) < 0)?.[0] ?? "kill-node";
    const fault = draw(kind, cast, between, skew);
    // One fault at a time on each process, and on the database (its crash and every node's link to it).
    const keys = kind.endsWith("-node")
      ? [`node:${(fault as { target: number }).target}`]
      : kind.endsWith("-consumer")
        ? [`consumer:${(fault as { target: number }).target}`]
        : kind.endsWith("-worker")
          ? [`worker:${(fault as { target: number }).target}`]
          : ["database"];
    if (keys.some((k) => (busyUntil.get(k) ?? 0) > at)) continue;
    const until = at + lengthOf(fault) + SETTLE_MS;
    for (const k of keys) busyUntil.set(k, until);
    faults.push({ atMs: at, fault });
  }
  return { skews, faults };
}

function draw(kind: Fault["kind"], cast: Cast, between: (lo: number, hi: number) => number, skew: () => number): Fault {
  const of = (n: number) => between(0, n - 1);
  switch (kind) {
    case "kill-node":
      return { kind, target: of(cast.nodes), downMs: between(200, 3000), skewMs: skew() };
    case "freeze-node":
      return { kind, target: of(cast.nodes), forMs: between(500, 5000) };
    case "restart-node":
      return { kind, target: of(cast.nodes), skewMs: skew() };
    case "kill-consumer":
      return { kind, target: of(cast.consumers), downMs: between(100, 2000) };
    case "freeze-consumer":
      return { kind, target: of(cast.consumers), forMs: between(500, 6000) };
    case "kill-worker":
      return { kind, target: of(cast.workers), downMs: between(100, 2000) };
    case "cut-database":
      return { kind, target: of(cast.nodes), forMs: between(300, 3000) };
    case "stall-database":
      return { kind, target: of(cast.nodes), forMs: between(300, 3000) };
    case "lose-commit-answer":
      return { kind, target: of(cast.nodes) };
    case "crash-database":
      return { kind, downMs: between(200, 2000) };
  }
}

/** How long a fault lasts, before its target is given back. */
export function lengthOf(f: Fault): number {
  if ("downMs" in f) return f.downMs;
  if ("forMs" in f) return f.forMs;
  return 2000;
}

/** One line of the run's log: what happens, to which one, for how long. */
export function describe(f: Fault): string {
  const on = "target" in f ? ` #${f.target}` : "";
  const span = "downMs" in f ? ` for ${f.downMs} ms` : "forMs" in f ? ` for ${f.forMs} ms` : "";
  const clock = "skewMs" in f ? `, its clock ${f.skewMs >= 0 ? "+" : ""}${f.skewMs} ms` : "";
  return `${f.kind}${on}${span}${clock}`;
}

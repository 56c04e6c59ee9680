// Real `orbit serve` processes for the benchmark, on a fresh database, and the CPU time
// each process (and MariaDB) used, read from /proc.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { createInterface } from "node:readline";
import mysql from "mysql2/promise";
import { freePort, PROFILE_DIR, registerInspector, withProfile } from "./profile.js";
import { ROUND_TRIPS_KEY } from "./common.js";

export const ORBIT_BIN = path.resolve(process.cwd(), "dist/src/cli/main.js");
/** Preloaded into a node started with countRoundTrips (compiled beside this file). */
const ROUND_TRIPS_PRELOAD = path.resolve(process.cwd(), "dist/bench/round-trips.js");

export interface BenchNode {
  readonly url: string;
  readonly pid: number;
  readonly child: ChildProcess;
  /** The commands its mysql2 connections sent so far (its round trips to MariaDB); only with countRoundTrips. */
  roundTrips(): Promise<number>;
  stop(): Promise<void>;
}

export interface StartNodeOptions {
  /** Preload round-trips.ts, so that roundTrips() can read the node's count. */
  readonly countRoundTrips?: boolean;
}

export async function freshDatabase(server: string, name: string): Promise<string> {
  const c = await mysql.createConnection({ uri: server });
  await c.query(`DROP DATABASE IF EXISTS \`${name}\``);
  await c.end();
  // Through URL, so that a query (e.g. ?socketPath=/run/mysqld/mysqld.sock) stays a query.
  const url = new URL(server);
  url.pathname = `/${name}`;
  return url.toString();
}

export async function dropDatabase(server: string, name: string): Promise<void> {
  const c = await mysql.createConnection({ uri: server });
  await c.query(`DROP DATABASE IF EXISTS \`${name}\``);
  await c.end();
}

export async function startNode(
  databaseUrl: string,
  env: Record<string, string> = {},
  options: StartNodeOptions = {},
): Promise<BenchNode> {
  // ORBIT_BENCH_NODE_ARGS passes flags to the nodes, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof".
  const nodeArgs = (process.env.ORBIT_BENCH_NODE_ARGS ?? "").split(" ").filter(Boolean);
  // ORBIT_BENCH_PROFILE_DIR: each timed phase (withCpu) profiles the nodes through an inspector.
  const inspectPort = PROFILE_DIR ? await freePort() : undefined;
  if (inspectPort) nodeArgs.push(`--inspect=127.0.0.1:${inspectPort}`);
  if (options.countRoundTrips) nodeArgs.push("--import", pathToFileURL(ROUND_TRIPS_PRELOAD).href);
  const roundTripWaiters: ((n: number) => void)[] = [];
  const child = spawn(process.execPath, [...nodeArgs, ORBIT_BIN, "serve"], {
    env: { ...process.env, ORBIT_DATABASE_URL: databaseUrl, ORBIT_PORT: "0", ORBIT_HOST: "127.0.0.1", ...env },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("orbit serve did not start")), 30000);
    createInterface({ input: child.stdout! }).on("line", (l) => {
      // The node's warnings and errors are the benchmark's business too.
      if (l.includes('"level":"error"') || l.includes('"level":"warn"')) process.stderr.write(`node: ${l}\n`);
      if (l.startsWith(`{"${ROUND_TRIPS_KEY}":`)) {
        roundTripWaiters.shift()?.((JSON.parse(l) as Record<string, number>)[ROUND_TRIPS_KEY]!);
        return;
      }
      if (!l.includes('"listening"')) return;
      clearTimeout(timer);
      resolve((JSON.parse(l) as { port: number }).port);
    });
    child.once("exit", (code) => reject(new Error(`orbit serve exited with ${code}`)));
  });
  if (inspectPort) registerInspector(child.pid!, inspectPort);
  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    child,
    roundTrips: () => {
      if (!options.countRoundTrips) return Promise.resolve(NaN);
      return new Promise<number>((resolve) => {
        roundTripWaiters.push(resolve);
        child.kill("SIGUSR2");
      });
    },
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
      }),
  };
}

export function bootstrap(databaseUrl: string, namespace: string, application: string, queues: string[]) {
  const args = [
    ORBIT_BIN,
    "bootstrap",
    "--namespace",
    namespace,
    "--application",
    application,
    "--event-access",
    "--json",
  ];
  for (const q of queues) args.push("--queue", q);
  return JSON.parse(
    execFileSync(process.execPath, args, {
      env: { ...process.env, ORBIT_DATABASE_URL: databaseUrl },
      encoding: "utf8",
    }),
  ) as {
    namespace_id: string;
    application_id: string;
    credential_id: string;
    token: string;
    queues: { id: string; name: string }[];
  };
}

/** utime + stime of a process, in seconds (Linux /proc). */
export function processCpuSeconds(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return NaN;
  }
}

export function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : NaN;
}

export function mariadbPid(): number | undefined {
  try {
    const out = execFileSync("pidof", ["mariadbd"], { encoding: "utf8" }).trim().split(/\s+/)[0];
    return out ? Number(out) : undefined;
  } catch {
    return undefined;
  }
}

/** CPU seconds per process during fn (and, with ORBIT_BENCH_PROFILE_DIR, the nodes' profiles of it, named by label). */
export async function withCpu<T>(
  pids: Record<string, number | undefined>,
  fn: () => Promise<T>,
  label = "phase",
): Promise<{ result: T; cpu: Record<string, number> }> {
  const before = Object.fromEntries(
    Object.entries(pids).map(([k, p]) => [k, p === undefined ? NaN : processCpuSeconds(p)]),
  );
  const self0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const result = await withProfile(pids, label, fn);
  const wall = Number(process.hrtime.bigint() - t0) / 1e9;
  const self = process.cpuUsage(self0);
  const cpu: Record<string, number> = { wall, bench: (self.user + self.system) / 1e6 };
  for (const [k, p] of Object.entries(pids)) cpu[k] = p === undefined ? NaN : processCpuSeconds(p) - before[k]!;
  return { result, cpu };
}

/** MariaDB's global counters the cost model is written in (SHOW GLOBAL STATUS). */
const DB_COUNTERS = [
  "Questions",
  "Com_commit",
  "Com_select",
  "Com_insert",
  "Com_update",
  "Com_update_multi",
  "Innodb_row_lock_waits",
  "Rows_read",
] as const;

/** Global counter deltas during fn (the whole server: the benchmark's own setup is kept outside fn). */
export async function withDbCounters<T>(
  server: string,
  fn: () => Promise<T>,
): Promise<{ result: T; counters: Record<string, number> }> {
  const c = await mysql.createConnection({ uri: server });
  try {
    const read = async () => {
      const [rows] = (await c.query("SHOW GLOBAL STATUS WHERE Variable_name IN (?)", [DB_COUNTERS])) as unknown as [
        { Variable_name: string; Value: string }[],
      ];
      return Object.fromEntries(rows.map((r) => [r.Variable_name, Number(r.Value)]));
    };
    const before = await read();
    const result = await fn();
    const after = await read();
    // Each read is itself one statement.
    const counters = Object.fromEntries(
      DB_COUNTERS.map((k) => [k, (after[k] ?? NaN) - (before[k] ?? NaN) - (k === "Questions" ? 1 : 0)]),
    );
    return { result, counters };
  } finally {
    await c.end();
  }
}

/** Counters divided by the number of items (results, deliveries), two decimals. */
export function perItem(counters: Record<string, number>, items: number): Record<string, number> {
  return Object.fromEntries(Object.entries(counters).map(([k, v]) => [k, Math.round((v / items) * 100) / 100]));
}

/** The node's claim histograms (GET /metrics): how many claims, their total seconds and leases. */
export async function claimStats(url: string): Promise<{ claims: number; seconds: number; leases: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const value = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1] ?? NaN);
  return {
    claims: value("orbit_claim_duration_seconds_count"),
    seconds: value("orbit_claim_duration_seconds_sum"),
    leases: value("orbit_claim_leases_sum"),
  };
}

/** Claims during fn: mean duration (ms) and mean deliveries leased per claim. */
export async function withClaimStats<T>(
  url: string,
  fn: () => Promise<T>,
): Promise<{ result: T; claims: { count: number; meanMs: number; meanLeases: number } }> {
  const a = await claimStats(url);
  const result = await fn();
  const b = await claimStats(url);
  const count = b.claims - a.claims;
  return {
    result,
    claims: {
      count,
      meanMs: Math.round(((b.seconds - a.seconds) / count) * 1e5) / 100,
      meanLeases: Math.round(((b.leases - a.leases) / count) * 10) / 10,
    },
  };
}

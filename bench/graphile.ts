// `peer.graphile-worker`: a job queue on PostgreSQL, the nearest peer to Orbit's task path —
// jobs added one per call by 16 producers (makeWorkerUtils().addJob), run by one runner
// (run(), concurrency 16) with a no-op task, timed from the first add to the last job the
// runner has marked done in the database. graphile-worker has no result delivery: its
// pipeline ends at the completed job, Orbit's at the subscriber's ACKed delivery.
//
// On a fresh database (orbit_bench_gw_<pid>, dropped after), on the PostgreSQL that answers
// on 127.0.0.1:5432; skipped with a note when none does (as peer.jetstream without NATS).
import { readdirSync, readFileSync } from "node:fs";
import { Logger, makeWorkerUtils, run, type Job } from "graphile-worker";
import pg from "pg";
import { cpuSeconds, percentile, type BenchOptions } from "./common.js";

const HOST = "127.0.0.1";
const PORT = 5432;
/** Trust authentication: whichever of these roles exists. */
const USERS = ["postgres", "root"];
const PRODUCERS = 16;
const CONCURRENCY = 16;
const TASK = "noop";

/** A role that connects, or why none did. */
async function findServer(): Promise<{ url: (db: string) => string } | { skipped: string }> {
  const reasons: string[] = [];
  for (const user of USERS) {
    const url = (db: string) => `postgres://${user}@${HOST}:${PORT}/${db}`;
    const c = new pg.Client({ connectionString: url("postgres"), connectionTimeoutMillis: 2000 });
    try {
      await c.connect();
      return { url };
    } catch (e) {
      reasons.push(`${user}: ${(e as Error).message}`);
    } finally {
      await c.end().catch(() => undefined);
    }
  }
  return { skipped: `no PostgreSQL answered on ${HOST}:${PORT} (${reasons.join("; ")})` };
}

/**
 * CPU seconds (user + system) of every `postgres` process now, by pid: the postmaster, its
 * background workers and one backend per connection (/proc).
 */
function postgresCpu(): Map<number, number> {
  const out = new Map<number, number>();
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, "utf8");
      if (!stat.includes("(postgres)")) continue;
      const f = stat.split(") ")[1]!.split(" ");
      out.set(Number(d), (Number(f[11]) + Number(f[12])) / 100);
    } catch {
      // The process ended between the listing and the read.
    }
  }
  return out;
}

/** CPU the postgres processes used between two readings (a backend started since counts whole). */
function postgresCpuSince(before: Map<number, number>): number {
  let sum = 0;
  for (const [pid, s] of postgresCpu()) sum += s - (before.get(pid) ?? 0);
  return sum;
}

export async function measureGraphileWorker(o: BenchOptions) {
  const jobs = o.quick ? 3000 : 10000;
  const warmUpJobs = o.quick ? 1000 : 2000;
  const server = await findServer();
  if ("skipped" in server) return server;
  const dbName = `orbit_bench_gw_${process.pid}`;
  const admin = new pg.Client({ connectionString: server.url("postgres") });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${dbName}`);
  await admin.query(`CREATE DATABASE ${dbName}`);
  const connectionString = server.url(dbName);
  const [settings] = (
    await admin.query<{ fsync: string; synchronous_commit: string; version: string }>(
      "SELECT current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS synchronous_commit, current_setting('server_version') AS version",
    )
  ).rows;
  const logger = new Logger(() => () => undefined);
  // Its pool has a connection for each producer: none waits for another's.
  const utils = await makeWorkerUtils({ connectionString, logger, maxPoolSize: PRODUCERS });
  let runner: Awaited<ReturnType<typeof run>> | undefined;
  try {
    await utils.migrate();
    let waiting: { n: number; resolve: () => void } | undefined;
    let finished = 0;
    const doneAt: number[] = [];
    runner = await run({
      connectionString,
      logger,
      concurrency: CONCURRENCY,
      // The runner's workers and its LISTEN connection.
      maxPoolSize: CONCURRENCY + 1,
      noHandleSignals: true,
      taskList: { [TASK]: async () => undefined },
    });
    // "job:complete" comes after the runner has deleted the job (completeJob): the job is done.
    runner.events.on("job:complete", ({ job, error }: { job: Job; error: unknown }) => {
      if (error) process.stderr.write(`bench: graphile-worker job ${job.id} failed: ${String(error)}\n`);
      // The add time travels in the payload: the job may be done before its add's answer is back.
      doneAt.push(Date.now() - (job.payload as { at: number }).at);
      if (waiting && ++finished === waiting.n) waiting.resolve();
    });
    const round = async (n: number) => {
      finished = 0;
      doneAt.length = 0;
      const all = new Promise<void>((resolve) => (waiting = { n, resolve }));
      let next = 0;
      const t0 = Date.now();
      await Promise.all(
        Array.from({ length: PRODUCERS }, async () => {
          while (next < n) {
            const i = next++;
            await utils.addJob(TASK, { i, at: Date.now() });
          }
        }),
      );
      await all;
      return { seconds: (Date.now() - t0) / 1000 };
    };
    // Untimed, as Orbit's pipeline: the runner's and the client's paths warmed up by V8.
    await round(warmUpJobs);
    const commits = async () =>
      Number(
        (
          await admin.query<{ c: string }>("SELECT xact_commit::text AS c FROM pg_stat_database WHERE datname = $1", [
            dbName,
          ])
        ).rows[0]?.c,
      );
    // PostgreSQL's backends report their counters when idle, at most once a second.
    await new Promise((r) => setTimeout(r, 1500));
    const commits0 = await commits();
    const pg0 = postgresCpu();
    const c0 = cpuSeconds();
    const r = await round(jobs);
    const benchCpu = cpuSeconds() - c0;
    const pgCpu = postgresCpuSince(pg0);
    await new Promise((res) => setTimeout(res, 1500));
    const commitsPerJob = ((await commits()) - commits0) / jobs;
    const lat = [...doneAt].sort((a, b) => a - b);
    const perJob = (s: number) => Math.round((s / jobs) * 1e6) / 1000;
    return {
      version: "graphile-worker 0.16",
      postgres: settings,
      jobs,
      producers: PRODUCERS,
      concurrency: CONCURRENCY,
      jobsPerSec: jobs / r.seconds,
      seconds: r.seconds,
      addToDoneMs: { p50: percentile(lat, 50), p99: percentile(lat, 99), samples: lat.length },
      cpu: { wall: r.seconds, bench: benchCpu, postgres: pgCpu },
      cpuMsPerJob: { bench: perJob(benchCpu), postgres: perJob(pgCpu), all: perJob(benchCpu + pgCpu) },
      // Every transaction of the database (pg_stat_database.xact_commit), the bench's own reads aside.
      postgresCommitsPerJob: Math.round(commitsPerJob * 100) / 100,
    };
  } finally {
    await runner?.stop();
    await utils.release();
    // Not WITH (FORCE): that would cut a pool's connection still closing, an unhandled
    // 'error' in pg. A plain DROP waits a few seconds for those to end.
    await admin.query(`DROP DATABASE IF EXISTS ${dbName}`);
    await admin.end();
  }
}

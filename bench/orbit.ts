// Orbit's own figures: append, drain, commit-to-deliver latency, idle cost.
// Every figure goes through real `orbit serve` processes over HTTP and WebSocket.
import { fork } from "node:child_process";
import path from "node:path";
import mysql from "mysql2/promise";
import { EventConnection, OrbitClient } from "../src/sdk/index.js";
import { createPool } from "../src/db/pool.js";
import { claim, ENGINE_SESSION } from "../src/domain/delivery-engine.js";
import { newRowId } from "../src/wire/ids.js";
import { loopDelay } from "./common.js";
import type { ConsumerCommand, ConsumerMessage } from "./latency-consumer.js";
import {
  bootstrap,
  freshDatabase,
  dropDatabase,
  mariadbPid,
  perItem,
  rssMiB,
  startNode,
  withClaimStats,
  withCpu,
  withDbCounters,
  type BenchNode,
  type StartNodeOptions,
} from "./nodes.js";

export interface OrbitBenchOptions {
  readonly quick: boolean;
  readonly mysqlUrl: string;
}

// Ids as Orbit makes them (time first, wire/ids.ts), so the seeded backlog indexes like a real one.
const id = () => newRowId();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

export async function withNodes<T>(
  o: OrbitBenchOptions,
  name: string,
  count: number,
  fn: (db: string, nodes: BenchNode[]) => Promise<T>,
  env: Record<string, string> = {},
  options: StartNodeOptions = {},
): Promise<T> {
  const dbName = `orbit_bench_${name}_${process.pid}`;
  const db = await freshDatabase(o.mysqlUrl, dbName);
  const nodes: BenchNode[] = [];
  try {
    for (let i = 0; i < count; i++) nodes.push(await startNode(db, env, options));
    return await fn(db, nodes);
  } finally {
    await Promise.all(nodes.map((n) => n.stop()));
    await dropDatabase(o.mysqlUrl, dbName);
  }
}

/** Runs `workers` loops until `items` is exhausted; returns the wall time in seconds. */
async function pool<T>(items: T[], workers: number, fn: (item: T) => Promise<void>): Promise<number> {
  let next = 0;
  const t0 = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (next < items.length) await fn(items[next++]!);
    }),
  );
  return Number(process.hrtime.bigint() - t0) / 1e9;
}

/** orbit.append: 16 workers complete pre-claimed attempts; each completion is one result. */
export async function measureAppend(o: OrbitBenchOptions) {
  const perWorker = o.quick ? 500 : 1000;
  return withNodes(o, "append", 1, async (db, [node]) => {
    const cred = bootstrap(db, "bench", "append", ["q"]);
    const client = new OrbitClient({ baseUrl: node!.url, token: cred.token });
    const q = cred.queues[0]!.id;
    const tasks = Array.from({ length: 16 * perWorker }, (_, i) => i);
    await pool(tasks, 16, async (i) => void (await client.submitTask(`t-${i}`, { queue_id: q, input: { i } })));
    const attempts: string[] = [];
    await pool(tasks, 16, async () => {
      const c = await client.claimTask({ queue_id: q });
      if (c) attempts.push(c.attempt_id);
    });
    // No warm-up of its own (unlike the drain's): the 16,000 submits and claims before the
    // timed part warm the node's HTTP path, and completions first change nothing.
    const pids = { node: node!.pid, mariadb: mariadbPid() };
    const counted = await withDbCounters(o.mysqlUrl, () =>
      withCpu(
        pids,
        () =>
          pool(
            attempts,
            16,
            async (a) => void (await client.completeAttempt(a, { outcome: "succeeded", result: { ok: true } })),
          ),
        "append",
      ),
    );
    const timed = counted.result;
    // The whole path: submit, claim, complete, 16 loops for a fixed time.
    const seconds = o.quick ? 4 : 10;
    let whole = 0;
    const until = Date.now() + seconds * 1000;
    await Promise.all(
      Array.from({ length: 16 }, async (_, w) => {
        for (let i = 0; Date.now() < until; i++) {
          const q2 = cred.queues[0]!.id;
          await client.submitTask(`w-${w}-${i}`, { queue_id: q2, input: i });
          const c = await client.claimTask({ queue_id: q2 });
          if (c) {
            await client.completeAttempt(c.attempt_id, { outcome: "succeeded" });
            whole++;
          }
        }
      }),
    );
    return {
      resultsPerSec: attempts.length / timed.result,
      results: attempts.length,
      workers: 16,
      submitClaimCompletePerSec: whole / seconds,
      cpu: timed.cpu,
      databasePerResult: perItem(counted.counters, attempts.length),
    };
  });
}

/** Writes a backlog straight into the result log (setup only), spread over the given queues. */
async function seedBacklog(db: string, namespaceId: string, queueIds: string[], total: number): Promise<void> {
  const c = await mysql.createConnection({ uri: db });
  try {
    const [[s]] = (await c.query("SELECT head_sequence FROM namespace_streams WHERE namespace_id = ?", [
      namespaceId,
    ])) as any;
    let head = Number(s.head_sequence);
    const now = new Date();
    for (let start = 0; start < total; start += 1000) {
      const rows: unknown[][] = [];
      for (let i = start; i < Math.min(total, start + 1000); i++) {
        const task = id();
        const queue = queueIds[i % queueIds.length]!;
        head++;
        const snapshot = {
          schema_version: 1,
          task_id: task,
          queue_id: queue,
          state: "SUCCEEDED",
          revision: "3",
          effect_uncertain: false,
          result: JSON.stringify({ i, pad: "x".repeat(600) }),
        };
        rows.push([
          id(),
          namespaceId,
          queue,
          head,
          "task.succeeded",
          task,
          3,
          now,
          '{"state":"SUCCEEDED","reason":"WORKER_SUCCEEDED"}',
          JSON.stringify(snapshot),
        ]);
      }
      await c.query(
        "INSERT INTO result_events (id, namespace_id, queue_id, sequence, type, aggregate_id, aggregate_revision, occurred_at, details, snapshot) VALUES ?",
        [rows],
      );
    }
    await c.query("UPDATE namespace_streams SET head_sequence = ? WHERE namespace_id = ?", [head, namespaceId]);
  } finally {
    await c.end();
  }
}

/** Connects consumers that ACK every delivery at once; resolves when `total` ACKs are confirmed. */
async function drain(
  url: string,
  consumers: { token: string; subscriptionId: string; capacity: number }[],
  total: number,
) {
  let acked = 0;
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  const conns = await Promise.all(
    consumers.map(async (c) => {
      const conn = await EventConnection.open({
        baseUrl: url,
        token: c.token,
        subscriptionId: c.subscriptionId,
        capacity: c.capacity,
        heartbeat: false,
      });
      conn.on("delivery", (d) => {
        void conn.ack(d.proof).then(
          (r) => {
            if (!r.deduplicated && ++acked === total) done();
          },
          (e: unknown) => process.stderr.write(`bench: ack failed: ${(e as Error).message}\n`),
        );
      });
      return conn;
    }),
  );
  await finished;
  await Promise.all(conns.map((c) => c.close()));
  return acked;
}

/**
 * Results a drain phase's node delivers, untimed, before its timed drains. A node that has
 * just started runs its claim, frame and ACK paths unoptimised until V8 has seen them run,
 * so the first timed drain on a fresh node reads low. A deployed node is warm; the figures
 * are for one.
 */
const WARM_UP_DELIVERIES = 5000;

/** Drains WARM_UP_DELIVERIES through a subscription of its own (4 × 32), untimed. */
async function warmUpDrain(db: string, url: string): Promise<void> {
  const w = bootstrap(db, "warmup", "warmup", ["q"]);
  const sub = await new OrbitClient({ baseUrl: url, token: w.token }).createSubscription("warm-up", {
    name: "warm-up",
    queue_id: w.queues[0]!.id,
    from_sequence: "0",
    max_pending: 1000,
  });
  await seedBacklog(db, w.namespace_id, [w.queues[0]!.id], WARM_UP_DELIVERIES);
  await drain(
    url,
    Array.from({ length: 4 }, () => ({ token: w.token, subscriptionId: sub.subscription.id, capacity: 32 })),
    WARM_UP_DELIVERIES,
  );
}

/** orbit.drain: 20,000 results to (a) 4 consumers × capacity 32 on one subscription, (b) 16 subscriptions × 1. */
export async function measureDrain(o: OrbitBenchOptions) {
  const total = 20000;
  return withNodes(o, "drain", 1, async (db, [node]) => {
    const pids = { node: node!.pid, mariadb: mariadbPid() };
    await warmUpDrain(db, node!.url);
    // (a) one subscription, 4 × 32
    const one = bootstrap(db, "bench", "drain", ["q"]);
    const client = new OrbitClient({ baseUrl: node!.url, token: one.token });
    const sub = await client.createSubscription("drain-one", {
      name: "drain-one",
      queue_id: one.queues[0]!.id,
      from_sequence: "0",
      max_pending: 1000,
    });
    await seedBacklog(db, one.namespace_id, [one.queues[0]!.id], total);
    const ca = await withClaimStats(node!.url, () =>
      withDbCounters(o.mysqlUrl, () =>
        withCpu(
          pids,
          () =>
            drain(
              node!.url,
              Array.from({ length: 4 }, () => ({
                token: one.token,
                subscriptionId: sub.subscription.id,
                capacity: 32,
              })),
              total,
            ),
          "drain-one",
        ),
      ),
    );
    const a = ca.result.result;
    // (b) 16 subscriptions in 16 applications, 1 consumer each; the 20,000 results spread over their queues.
    const apps = Array.from({ length: 16 }, (_, i) => bootstrap(db, "bench16", `app${i}`, [`q${i}`]));
    const subs = await Promise.all(
      apps.map((c, i) =>
        new OrbitClient({ baseUrl: node!.url, token: c.token }).createSubscription(`drain-${i}`, {
          name: `drain-${i}`,
          queue_id: c.queues[0]!.id,
          from_sequence: "0",
          max_pending: 1000,
        }),
      ),
    );
    await seedBacklog(
      db,
      apps[0]!.namespace_id,
      apps.map((c) => c.queues[0]!.id),
      total,
    );
    const cb = await withClaimStats(node!.url, () =>
      withDbCounters(o.mysqlUrl, () =>
        withCpu(
          pids,
          () =>
            drain(
              node!.url,
              apps.map((c, i) => ({ token: c.token, subscriptionId: subs[i]!.subscription.id, capacity: 32 })),
              total,
            ),
          "drain-sixteen",
        ),
      ),
    );
    const b = cb.result.result;
    return {
      oneSubscription: {
        deliveriesPerSec: total / a.cpu.wall!,
        deliveries: total,
        consumers: 4,
        capacity: 32,
        cpu: a.cpu,
        databasePerDelivery: perItem(ca.result.counters, total),
        claims: ca.claims,
      },
      sixteenSubscriptions: {
        deliveriesPerSec: total / b.cpu.wall!,
        deliveries: total,
        subscriptions: 16,
        capacity: 32,
        cpu: b.cpu,
        databasePerDelivery: perItem(cb.result.counters, total),
        claims: cb.claims,
      },
    };
  });
}

/**
 * orbit.scaling: how one subscription's drain moves with capacity (4 consumers × 1/8/32)
 * and with consumers (1/4/16 × capacity 32); each point drains its own fresh backlog.
 */
export async function measureScaling(o: OrbitBenchOptions) {
  const total = o.quick ? 3000 : 10000;
  const points: { consumers: number; capacity: number }[] = [
    { consumers: 4, capacity: 1 },
    { consumers: 4, capacity: 8 },
    { consumers: 4, capacity: 32 },
    { consumers: 1, capacity: 32 },
    { consumers: 16, capacity: 32 },
  ];
  return withNodes(o, "scaling", 1, async (db, [node]) => {
    const out: {
      consumers: number;
      capacity: number;
      deliveriesPerSec: number;
      claims: { count: number; meanMs: number; meanLeases: number };
    }[] = [];
    await warmUpDrain(db, node!.url);
    for (const [i, p] of points.entries()) {
      const cred = bootstrap(db, `scale${i}`, "scale", ["q"]);
      const client = new OrbitClient({ baseUrl: node!.url, token: cred.token });
      const sub = await client.createSubscription(`scale-${i}`, {
        name: `scale-${i}`,
        queue_id: cred.queues[0]!.id,
        from_sequence: "0",
        max_pending: 1000,
      });
      await seedBacklog(db, cred.namespace_id, [cred.queues[0]!.id], total);
      const t0 = process.hrtime.bigint();
      const r = await withClaimStats(node!.url, () =>
        drain(
          node!.url,
          Array.from({ length: p.consumers }, () => ({
            token: cred.token,
            subscriptionId: sub.subscription.id,
            capacity: p.capacity,
          })),
          total,
        ),
      );
      out.push({ ...p, deliveriesPerSec: total / (Number(process.hrtime.bigint() - t0) / 1e9), claims: r.claims });
    }
    return { deliveries: total, points: out };
  });
}

/**
 * orbit.claim: the claim on its own, on an otherwise idle machine — the floor under
 * orbit.drain's one subscription. docs/protocol.md §5 allows one claim in flight per
 * application and a claim gives a connection at most its 8 free write slots, so 4
 * connections take at most 32 per claim and drain at most 32 / (claim + the frames' turn)
 * per second, however fast the rest is. Measured in this process against the database
 * directly (the engine's own claim(), its own pool settings), one subscription per round
 * with 1,000 results: the first claim also materialises the 1,000 (timed apart), then
 * claims of 4 seats × 8 until the backlog is gone; between claims the leases are ACKed by a
 * plain UPDATE, outside the timing, so every seat has room again.
 */
export async function measureClaimFloor(o: OrbitBenchOptions) {
  const rounds = o.quick ? 3 : 8;
  return withNodes(o, "claim", 1, async (db, [node]) => {
    const claimPool = createPool(db, 1, ENGINE_SESSION);
    const admin = await mysql.createConnection({ uri: db });
    const seats = Array.from({ length: 4 }, () => ({ sessionId: id(), capacity: 32, maxLeases: 8 }));
    const full: number[] = [];
    const materialising: number[] = [];
    try {
      for (let r = 0; r < rounds; r++) {
        const cred = bootstrap(db, `claim${r}`, "claim", ["q"]);
        const client = new OrbitClient({ baseUrl: node!.url, token: cred.token });
        const sub = await client.createSubscription(`claim-${r}`, {
          name: `claim-${r}`,
          queue_id: cred.queues[0]!.id,
          from_sequence: "0",
          max_pending: 1000,
        });
        await seedBacklog(db, cred.namespace_id, [cred.queues[0]!.id], 1000);
        for (let k = 0; ; k++) {
          await admin.query(
            "UPDATE deliveries SET state = 'ACKED', acknowledged_at = NOW(3), lease_until = NULL, session_id = NULL WHERE subscription_id = ? AND state = 'LEASED'",
            [sub.subscription.id],
          );
          const t0 = performance.now();
          const out = await claim(claimPool, { subscriptionId: sub.subscription.id, leaseDurationMs: 30_000, seats });
          const ms = performance.now() - t0;
          const leased = out.seats.reduce((n, seat) => n + seat.leases.length, 0);
          if (k === 0) materialising.push(ms);
          else if (leased === 32) full.push(ms);
          if (leased < 32) break;
        }
      }
    } finally {
      await claimPool.end();
      await admin.end();
    }
    const sorted = [...full].sort((a, b) => a - b);
    const mean = full.reduce((a, b) => a + b, 0) / full.length;
    const round2 = (x: number) => Math.round(x * 100) / 100;
    return {
      claims: full.length,
      leasesPerClaim: 32,
      p50Ms: round2(percentile(sorted, 50)),
      meanMs: round2(mean),
      p90Ms: round2(percentile(sorted, 90)),
      materialisingClaimMs: round2(materialising.reduce((a, b) => a + b, 0) / materialising.length),
      /** 32 per claim, one claim at a time, nothing else on the machine: the 4 × 32 drain cannot pass this. */
      drainCeilingPerSec: Math.round((32 * 1000) / mean),
    };
  });
}

/** orbit.latency's consumer process (compiled beside this file; run from the project root, as http-floor.ts). */
const CONSUMER = path.resolve(process.cwd(), "dist/bench/latency-consumer.js");

/** At most this many completions in flight in orbit.latency (the node's pool queues them). */
const MAX_PRODUCING = 128;

/** Where orbit.latency's consumers run: on the node the producers complete on, on the other node. */
export type LatencyConsumer = "same" | "other";

/** A latency consumer in a process of its own (latency-consumer.ts). */
interface Consumer {
  readonly pid: number | undefined;
  /** Deliveries so far, as its last message said (every 100 ms). */
  readonly received: number;
  measureFrom(at: number): void;
  /** Its samples; it then closes its connection and exits. */
  report(): Promise<Extract<ConsumerMessage, { type: "report" }>>;
  kill(): void;
}

async function startConsumer(baseUrl: string, token: string, subscriptionId: string): Promise<Consumer> {
  const child = fork(CONSUMER, [baseUrl, token, subscriptionId], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  let received = 0;
  let reported: ((m: Extract<ConsumerMessage, { type: "report" }>) => void) | undefined;
  let exited: ((e: Error) => void) | undefined;
  const ready = new Promise<void>((resolve, reject) => {
    exited = reject;
    child.on("message", (m: ConsumerMessage) => {
      if (m.type === "ready") resolve();
      if (m.type === "received") received = m.n;
      if (m.type === "report") reported?.(m);
    });
  });
  // Before it is ready, or before it reported: the run fails instead of waiting for it.
  child.once("exit", (code) => exited?.(new Error(`latency consumer exited (${code}) before it reported`)));
  await ready;
  const command = (c: ConsumerCommand) => child.send(c);
  return {
    pid: child.pid,
    get received() {
      return received;
    },
    measureFrom: (at) => command({ type: "measure-from", at }),
    report: () =>
      new Promise((resolve, reject) => {
        reported = resolve;
        exited = reject;
        command({ type: "report" });
      }),
    kill: () => void child.kill(),
  };
}

/**
 * orbit.latency: commit-to-deliver at a steady `rate` results/s (500 by default, the goals'
 * rate), with a consumer on the same node, on another node, or both at once (each its own
 * subscription). Both nodes run on this one 2-core machine: with both consumers at once the
 * other node's deliveries take cores the same node's would have on a machine of its own, so
 * each is also measured alone.
 */
export async function measureLatency(
  o: OrbitBenchOptions,
  rate = 500,
  consumers: readonly LatencyConsumer[] = ["same", "other"],
) {
  const seconds = o.quick ? 6 : 20;
  // The first seconds at 500/s are a ramp (the nodes' JIT, MariaDB's buffers) with a higher
  // p99 than what follows. They are produced but not counted, as db.* measurements skip
  // their first second.
  const warmupSeconds = o.quick ? 2 : 3;
  return withNodes(o, "latency", 2, async (db, [a, b]) => {
    const cred = bootstrap(db, "bench", "latency", ["q"]);
    const q = cred.queues[0]!.id;
    const client = new OrbitClient({ baseUrl: a!.url, token: cred.token });
    const subscriptionFor = async (which: LatencyConsumer) =>
      (await client.createSubscription(`lat-${which}`, { name: `lat-${which}`, queue_id: q, max_pending: 1000 }))
        .subscription.id;
    const n = rate * (warmupSeconds + seconds);
    const tasks = Array.from({ length: n }, (_, i) => i);
    await pool(tasks, 16, async (i) => void (await client.submitTask(`l-${i}`, { queue_id: q, input: i })));
    const attempts: string[] = [];
    await pool(tasks, 16, async () => {
      const c = await client.claimTask({ queue_id: q });
      if (c) attempts.push(c.attempt_id);
    });
    const started: Partial<Record<LatencyConsumer, Consumer>> = {};
    for (const which of consumers)
      started[which] = await startConsumer(
        which === "same" ? a!.url : b!.url,
        cred.token,
        await subscriptionFor(which),
      );
    const running = Object.values(started) as Consumer[];
    try {
      const t0 = Date.now();
      for (const c of running) c.measureFrom(t0 + warmupSeconds * 1000);
      // Open loop: each completion starts at its due time, whatever the others are doing (at
      // most MAX_PRODUCING at once). A fixed set of 16 producers each waiting for its last
      // completion falls behind on a busy machine and produces well under the rate it
      // claims; the achieved rate is reported beside the figures.
      let finished = 0;
      let lastDone = t0;
      const produce = async () => {
        const producing = new Set<Promise<void>>();
        for (let i = 0; i < attempts.length; i++) {
          const due = t0 + (i * 1000) / rate;
          if (due > Date.now()) await sleep(due - Date.now());
          while (producing.size >= MAX_PRODUCING) await Promise.race(producing);
          const p: Promise<void> = client
            .completeAttempt(attempts[i]!, { outcome: "succeeded" })
            .then(() => {
              finished++;
              lastDone = Date.now();
            })
            .finally(() => producing.delete(p));
          producing.add(p);
        }
        await Promise.all(producing);
      };
      const settle = async () => {
        for (const end = Date.now() + 10000; running.some((c) => c.received < attempts.length) && Date.now() < end;)
          await sleep(50);
      };
      const pids = {
        nodeA: a!.pid,
        nodeB: b!.pid,
        mariadb: mariadbPid(),
        ...(started.same ? { consumerSame: started.same.pid } : {}),
        ...(started.other ? { consumerOther: started.other.pid } : {}),
      };
      const run = () =>
        withDbCounters(o.mysqlUrl, () =>
          withCpu(
            pids,
            async () => {
              await produce();
              await settle();
            },
            `latency-${rate}-${consumers.join("-")}`,
          ),
        );
      // The producers' event loop: its delay does not reach the consumers' figures (each
      // consumer reports its own beside them).
      const loop = loopDelay();
      const claimsA = await withClaimStats(a!.url, () => withClaimStats(b!.url, run));
      const producersLoop = loop.read();
      const { result: measured, counters } = claimsA.result.result;
      const stats = async (c: Consumer) => {
        const r = await c.report();
        const s = [...r.samples].sort((x, y) => x - y);
        return {
          p50Ms: percentile(s, 50),
          p99Ms: percentile(s, 99),
          samples: s.length,
          consumerLoopDelayMs: r.loopDelayMs,
        };
      };
      return {
        ratePerSec: rate,
        seconds,
        warmupSeconds,
        // What the producers achieved: results completed per second from the start to the last.
        achievedPerSec: Math.round(finished / ((lastDone - t0) / 1000)),
        // How busy the machine was (2 cores): producing, delivering and the settle after.
        cpu: measured.cpu,
        // MariaDB's counters per result produced (every consumer's deliveries included).
        databasePerResult: perItem(counters, attempts.length),
        consumers: [...consumers],
        ...(started.same ? { sameNode: { ...(await stats(started.same)), claims: claimsA.claims } } : {}),
        ...(started.other ? { otherNode: { ...(await stats(started.other)), claims: claimsA.result.claims } } : {}),
        // The producers' own event loop (the consumers run in processes of their own).
        benchLoopDelayMs: producersLoop,
      };
    } catch (e) {
      // A failed run must not leave its consumer processes behind.
      for (const c of running) c.kill();
      throw e;
    }
  });
}

/** orbit.idle: database queries/s and node RSS with 128 idle event connections. */
export async function measureIdle(o: OrbitBenchOptions) {
  const seconds = o.quick ? 20 : 60;
  return withNodes(o, "idle", 1, async (db, [node]) => {
    const creds = Array.from({ length: 8 }, (_, i) => bootstrap(db, "bench", `idle${i}`, [`q${i}`]));
    const subs = await Promise.all(
      creds.map((c, i) =>
        new OrbitClient({ baseUrl: node!.url, token: c.token }).createSubscription(`idle-${i}`, {
          name: `idle-${i}`,
          queue_id: c.queues[0]!.id,
        }),
      ),
    );
    const conns: EventConnection[] = [];
    for (let i = 0; i < 128; i++) {
      const c = creds[i % 8]!;
      conns.push(
        await EventConnection.open({
          baseUrl: node!.url,
          token: c.token,
          subscriptionId: subs[i % 8]!.subscription.id,
          capacity: 1,
        }),
      );
    }
    await sleep(2000); // settle: first claims done
    const m = await mysql.createConnection({ uri: o.mysqlUrl });
    const questions = async () =>
      Number(((await m.query("SHOW GLOBAL STATUS LIKE 'Questions'"))[0] as { Value: string }[])[0]!.Value);
    const q0 = await questions();
    await sleep(seconds * 1000);
    const used = (await questions()) - q0 - 1;
    const rss = rssMiB(node!.pid);
    await m.end();
    await Promise.all(conns.map((c) => c.close()));
    return {
      connections: 128,
      seconds,
      queriesPerSec: used / seconds,
      queriesPerSecPerConnection: used / seconds / 128,
      nodeRssMiB: rss,
    };
  });
}

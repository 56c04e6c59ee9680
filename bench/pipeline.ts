// orbit.pipeline.*: the whole path a task takes — submitted over HTTP, claimed and completed
// by workers over HTTP, its result appended to the log and delivered to a subscriber, which
// ACKs it — timed from the first submit to the last ACK the node confirmed.
//
// Producers and workers are plain single-task HTTP calls on keep-alive connections, what a
// client in any language does without an SDK; the subscriber is the SDK's Consumer in a
// process of its own (pipeline-consumer.ts). The producers note each task's submit time,
// the consumer each task's first delivery: both on this machine's clock.
import { fork, type ChildProcess } from "node:child_process";
import http from "node:http";
import path from "node:path";
import { OrbitClient } from "../src/sdk/index.js";
import { percentile } from "./common.js";
import { bootstrap, mariadbPid, perItem, withCpu, withDbCounters, type BenchNode } from "./nodes.js";
import { withNodes, type OrbitBenchOptions } from "./orbit.js";
import type { PipelineConsumerCommand, PipelineConsumerMessage } from "./pipeline-consumer.js";
import type { PipelineWorkerCommand, PipelineWorkerMessage } from "./pipeline-worker.js";

/** Tasks the workers hold at once, in all: one claim → complete loop each. */
const WORKERS = 16;
const PRODUCERS = 16;
/** The workers' long poll: an idle worker waits this long on the node for a task. */
const CLAIM_WAIT_MS = 1000;
/** At most this many submits in flight in the open-loop (latency) producers. */
const MAX_SUBMITTING = 128;
/** A pipeline that has not delivered everything by then failed (instead of hanging the run). */
const ROUND_TIMEOUT_MS = 300_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A lean HTTP client: node:http on keep-alive connections, one request per call, no retries
 * and no schema validation. The client shares the machine's two cores with the node and
 * MariaDB, so what it costs is counted in the figures; the SDK's OrbitClient does more per
 * call than a minimal client in another language would.
 */
class LeanClient {
  private readonly agent: http.Agent;
  private readonly host: string;
  private readonly port: number;
  private readonly auth: string;

  constructor(baseUrl: string, token: string, sockets: number) {
    const u = new URL(baseUrl);
    this.host = u.hostname;
    this.port = Number(u.port);
    this.auth = `Bearer ${token}`;
    this.agent = new http.Agent({ keepAlive: true, maxSockets: sockets });
  }

  post(path: string, body: string, key?: string): Promise<{ status: number; text: string }> {
    const headers: Record<string, string> = {
      Authorization: this.auth,
      "Content-Type": "application/json",
      "Content-Length": String(Buffer.byteLength(body)),
    };
    if (key !== undefined) headers["Idempotency-Key"] = key;
    return new Promise((resolve, reject) => {
      const req = http.request(
        { host: this.host, port: this.port, path, method: "POST", headers, agent: this.agent },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () => {
            const text = Buffer.concat(chunks).toString("utf8");
            const status = res.statusCode ?? 0;
            if (status >= 300) reject(new Error(`POST ${path}: ${status} ${text}`));
            else resolve({ status, text });
          });
          res.on("error", reject);
        },
      );
      req.on("error", reject);
      req.end(body);
    });
  }

  close(): void {
    this.agent.destroy();
  }
}

/** The pipeline's subscriber process (pipeline-consumer.ts, compiled beside this file). */
const CONSUMER = path.resolve(process.cwd(), "dist/bench/pipeline-consumer.js");

type Done = Extract<PipelineConsumerMessage, { type: "done" }>;

interface PipelineConsumer {
  readonly pid: number | undefined;
  /**
   * Resolves once it counts from zero, with `finished`, which settles when `n` tasks are
   * delivered and ACKed (wrapped: a promise resolved with a promise would wait for it).
   */
  expect(n: number): Promise<{ finished: Promise<Done> }>;
  stop(): Promise<void>;
  kill(): void;
}

function startConsumer(baseUrl: string, token: string, subscriptionId: string): PipelineConsumer {
  const child: ChildProcess = fork(CONSUMER, [baseUrl, token, subscriptionId], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  let onMessage: ((m: PipelineConsumerMessage) => void) | undefined;
  let onExit: ((e: Error) => void) | undefined;
  child.on("message", (m: PipelineConsumerMessage) => onMessage?.(m));
  child.once("exit", (code) => onExit?.(new Error(`pipeline consumer exited (${code})`)));
  const command = (c: PipelineConsumerCommand) => child.send(c);
  return {
    pid: child.pid,
    expect: (n) =>
      new Promise((ready, failed) => {
        let done!: (d: Done) => void;
        let lost!: (e: Error) => void;
        const finished = new Promise<Done>((resolve, reject) => ((done = resolve), (lost = reject)));
        // Not awaited by everyone at once: a crash before the end fails the round through it.
        finished.catch(() => undefined);
        onExit = (e) => (failed(e), lost(e));
        onMessage = (m) => {
          if (m.type === "expecting") ready({ finished });
          if (m.type === "done") done(m);
        };
        command({ type: "expect", n });
      }),
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        onExit = () => resolve();
        command({ type: "stop" });
      }),
    kill: () => void child.kill(),
  };
}

/** The pipeline's workers, started for a round and stopped after it. */
interface Workers {
  readonly kind: string;
  readonly pid?: number | undefined;
  start(): {
    /** Rejects if the workers fail before stop(). */
    readonly failed: Promise<never>;
    /** Stops them once what they claimed is completed; resolves with the tasks they handled. */
    stop(): Promise<number>;
  };
  close(): Promise<void>;
}

/**
 * Plain single-task HTTP workers in the bench process: WORKERS loops of claim (long poll)
 * → complete, one task each.
 */
function httpWorkers(c: LeanClient, queueId: string): Workers {
  const claimBody = JSON.stringify({ queue_id: queueId, wait_ms: CLAIM_WAIT_MS });
  const completeBody = JSON.stringify({ outcome: "succeeded", result: { ok: true } });
  return {
    kind: `${WORKERS} loops of single-task HTTP calls (claim, complete) in the bench process`,
    start() {
      let stopping = false;
      let completed = 0;
      const loops = Promise.all(
        Array.from({ length: WORKERS }, async () => {
          while (!stopping) {
            const claimed = await c.post("/v1/worker/claim", claimBody);
            if (claimed.status === 204) continue;
            const attempt = (JSON.parse(claimed.text) as { data: { attempt_id: string } }).data.attempt_id;
            await c.post(`/v1/worker/attempts/${attempt}:complete`, completeBody);
            completed++;
          }
        }),
      );
      return {
        failed: loops.then(() => Promise.reject(new Error("pipeline: the workers stopped early"))),
        stop: async () => {
          stopping = true;
          await loops;
          return completed;
        },
      };
    },
    close: async () => undefined,
  };
}

/** The pipeline's SDK worker process (pipeline-worker.ts, compiled beside this file). */
const WORKER = path.resolve(process.cwd(), "dist/bench/pipeline-worker.js");

/** The SDK's Worker, concurrency WORKERS, in a process of its own. */
function sdkWorkers(baseUrl: string, token: string, queueId: string): Workers {
  const child: ChildProcess = fork(WORKER, [baseUrl, token, queueId, String(WORKERS), String(CLAIM_WAIT_MS)], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  let onMessage: ((m: PipelineWorkerMessage) => void) | undefined;
  let onExit: ((e: Error) => void) | undefined;
  child.on("message", (m: PipelineWorkerMessage) => onMessage?.(m));
  child.once("exit", (code) => onExit?.(new Error(`pipeline worker exited (${code})`)));
  const command = (m: PipelineWorkerCommand) => child.send(m);
  return {
    kind: `the SDK's Worker, concurrency ${WORKERS}, in a process of its own`,
    pid: child.pid,
    start() {
      let fail!: (e: Error) => void;
      const failed = new Promise<never>((_, reject) => (fail = reject));
      failed.catch(() => undefined);
      let stopped: { resolve: (n: number) => void; reject: (e: Error) => void } | undefined;
      onExit = fail;
      onMessage = (m) => {
        if (m.type === "failed") fail(new Error(`pipeline worker: ${m.message}`));
        if (m.type === "stopped") {
          // A refused completion is a task the pipeline did not finish as counted: the round fails.
          if (m.refused > 0) stopped?.reject(new Error(`pipeline worker: ${m.refused} completions refused`));
          else stopped?.resolve(m.completed);
        }
      };
      command({ type: "start" });
      return {
        failed,
        stop: () =>
          new Promise<number>((resolve, reject) => {
            stopped = { resolve, reject };
            onExit = reject;
            command({ type: "stop" });
          }),
      };
    },
    close: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        onExit = () => resolve();
        command({ type: "exit" });
      }),
  };
}

interface Round {
  /** Each task's submit time (ms since the epoch), by task id. */
  readonly submitAt: Map<string, number>;
  readonly firstSubmitAt: number;
  readonly lastSubmittedAt: number;
  readonly consumer: Done;
}

/**
 * One round of `n` tasks through the pipeline: the consumer is told to count them, the
 * workers start, the producers submit (closed loop: 16 producers, each submitting its next
 * task when its last was answered; or open loop at `rate` tasks/s, each submit at its due
 * time), and the round ends when the consumer has all `n` delivered and ACKed. The workers
 * are stopped by `finish()`, after the timed part: an idle worker's last claim waits out its
 * long poll.
 */
async function round(
  c: LeanClient,
  workers: Workers,
  queueId: string,
  consumer: PipelineConsumer,
  n: number,
  keyPrefix: string,
  rate?: number,
): Promise<{ round: Round; finish: () => Promise<number> }> {
  const { finished: delivered } = await consumer.expect(n);
  const submitAt = new Map<string, number>();
  const running = workers.start();
  const submit = async (i: number) => {
    const at = Date.now();
    const r = await c.post("/v1/tasks", JSON.stringify({ queue_id: queueId, input: { i } }), `${keyPrefix}-${i}`);
    submitAt.set((JSON.parse(r.text) as { data: { task: { id: string } } }).data.task.id, at);
  };
  const firstSubmitAt = Date.now();
  let lastSubmittedAt = firstSubmitAt;
  const produce = async () => {
    if (rate === undefined) {
      let next = 0;
      await Promise.all(
        Array.from({ length: PRODUCERS }, async () => {
          while (next < n) await submit(next++);
        }),
      );
    } else {
      // Open loop: each submit starts at its due time, whatever the others are doing; a
      // fixed set of producers each waiting for its last answer would fall behind the rate
      // on a busy machine and offer less than it claims.
      const submitting = new Set<Promise<void>>();
      for (let i = 0; i < n; i++) {
        const due = firstSubmitAt + (i * 1000) / rate;
        if (due > Date.now()) await sleep(due - Date.now());
        while (submitting.size >= MAX_SUBMITTING) await Promise.race(submitting);
        const p: Promise<void> = submit(i).finally(() => submitting.delete(p));
        submitting.add(p);
      }
      await Promise.all(submitting);
    }
    lastSubmittedAt = Date.now();
  };
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`pipeline: ${n} tasks not delivered within ${ROUND_TIMEOUT_MS} ms`)),
      ROUND_TIMEOUT_MS,
    );
  });
  try {
    // A failed worker, producer or consumer fails the round at once.
    const [, done] = await Promise.race([Promise.all([produce(), delivered]), running.failed, timeout]);
    return {
      round: { submitAt, firstSubmitAt, lastSubmittedAt, consumer: done },
      finish: () => running.stop(),
    };
  } finally {
    clearTimeout(timer);
  }
}

/** Submit → delivered (ms) of the tasks submitted at or after `from`, ascending. */
function latencies(r: Round, from = 0): number[] {
  const out: number[] = [];
  for (const [id, at] of r.consumer.delivered) {
    const submitted = r.submitAt.get(id);
    if (submitted !== undefined && submitted >= from) out.push(at - submitted);
  }
  return out.sort((a, b) => a - b);
}

/** CPU ms per task of each process, and the share of all of it the benchmark's own client took. */
function cpuPerTask(cpu: Record<string, number>, tasks: number) {
  const perTask: Record<string, number> = {};
  let all = 0;
  for (const [k, v] of Object.entries(cpu)) {
    if (k === "wall") continue;
    perTask[k] = Math.round((v / tasks) * 1e6) / 1000;
    all += v;
  }
  const client = (cpu.bench ?? 0) + (cpu.consumer ?? 0) + (cpu.worker ?? 0);
  return {
    cpuMsPerTask: { ...perTask, all: Math.round((all / tasks) * 1e6) / 1000 },
    clientShareOfCpu: Math.round((client / all) * 100) / 100,
  };
}

async function subscribe(node: BenchNode, token: string, queueId: string, name: string): Promise<string> {
  // from_sequence omitted: the subscription starts at the log's head when it is created, as
  // an application's would; it is created before the first task is submitted.
  const s = await new OrbitClient({ baseUrl: node.url, token }).createSubscription(name, { name, queue_id: queueId });
  return s.subscription.id;
}

/**
 * Tasks through the pipeline before the timed part, on the same queue, subscription and
 * consumer: a node that has just started runs its paths unoptimised until V8 has seen them
 * run (bench/orbit.ts, WARM_UP_DELIVERIES), and a deployed node is warm.
 */
const warmUpTasks = (o: OrbitBenchOptions) => (o.quick ? 1000 : 2000);

/** How the pipeline's workers run: the SDK's Worker (orbit.pipeline), or plain single-task HTTP calls (orbit.pipeline.http). */
export type PipelineDriver = "sdk" | "http";

function startWorkers(driver: PipelineDriver, c: LeanClient, node: BenchNode, token: string, queueId: string) {
  return driver === "sdk" ? sdkWorkers(node.url, token, queueId) : httpWorkers(c, queueId);
}

/** orbit.pipeline and orbit.pipeline.http: the pipeline's throughput, closed loop (16 producers, 16 tasks in flight at the workers, one subscriber). */
export async function measurePipeline(o: OrbitBenchOptions, driver: PipelineDriver) {
  const tasks = o.quick ? 3000 : 10000;
  return withNodes(
    o,
    `pipeline_${driver}`,
    1,
    async (db, [node]) => {
      const cred = bootstrap(db, "bench", "pipeline", ["q"]);
      const q = cred.queues[0]!.id;
      const subscriptionId = await subscribe(node!, cred.token, q, "pipeline");
      const consumer = startConsumer(node!.url, cred.token, subscriptionId);
      const c = new LeanClient(node!.url, cred.token, PRODUCERS + WORKERS);
      const workers = startWorkers(driver, c, node!, cred.token, q);
      try {
        const warm = await round(c, workers, q, consumer, warmUpTasks(o), "warm");
        await warm.finish();
        const pids: Record<string, number | undefined> = {
          node: node!.pid,
          mariadb: mariadbPid(),
          consumer: consumer.pid,
        };
        if (workers.pid !== undefined) pids.worker = workers.pid;
        const rt0 = await node!.roundTrips();
        const measured = await withDbCounters(o.mysqlUrl, () =>
          withCpu(pids, () => round(c, workers, q, consumer, tasks, "t"), `pipeline-${driver}`),
        );
        const roundTrips = (await node!.roundTrips()) - rt0;
        const { round: r, finish } = measured.result.result;
        const completed = await finish();
        const seconds = (r.consumer.lastAckAt - r.firstSubmitAt) / 1000;
        const l = latencies(r);
        return {
          tasks,
          producers: PRODUCERS,
          workers: WORKERS,
          claimWaitMs: CLAIM_WAIT_MS,
          workerKind: workers.kind,
          consumer: "SDK Consumer, capacity 32, a process of its own",
          tasksPerSec: tasks / seconds,
          seconds,
          submitPerSec: tasks / ((r.lastSubmittedAt - r.firstSubmitAt) / 1000),
          submitToDeliveredMs: { p50: percentile(l, 50), p99: percentile(l, 99), samples: l.length },
          completed,
          duplicates: r.consumer.duplicates,
          cpu: measured.result.cpu,
          ...cpuPerTask(measured.result.cpu, tasks),
          databasePerTask: {
            ...perItem(measured.counters, tasks),
            roundTrips: Math.round((roundTrips / tasks) * 100) / 100,
          } as Record<string, number>,
        };
      } finally {
        c.close();
        await workers.close();
        await consumer.stop();
      }
    },
    {},
    { countRoundTrips: true },
  );
}

/** Where orbit.pipeline.latency's subscriber runs: on the node the producers and workers use, or on another. */
export type PipelineTopology = "same" | "other";

interface TopologyResult {
  p50Ms: number;
  p99Ms: number;
  maxMs: number | undefined;
  samples: number;
  submittedPerSec: number;
  deliveredPerSec: number;
  cpu: Record<string, number>;
  cpuMsPerTask: Record<string, number>;
  clientShareOfCpu: number;
  databasePerTask: Record<string, number>;
}

/**
 * orbit.pipeline.latency: submit → delivered at a fixed offered rate (open loop), the
 * subscriber on the producers' and workers' node A, then, in a run of its own, on node B
 * (a second `orbit serve` on the same database). The first seconds are a ramp (the nodes'
 * JIT, MariaDB's buffers): produced, not counted.
 */
export async function measurePipelineLatency(o: OrbitBenchOptions, rate: number, driver: PipelineDriver = "sdk") {
  const seconds = o.quick ? 6 : 20;
  const warmupSeconds = o.quick ? 2 : 3;
  const n = Math.round(rate * (warmupSeconds + seconds));
  return withNodes(
    o,
    "pipeline_latency",
    2,
    async (db, [a, b]) => {
      const cred = bootstrap(db, "bench", "pipeline-latency", ["same", "other"]);
      const out: Partial<Record<PipelineTopology, TopologyResult>> = {};
      for (const [k, which] of (["same", "other"] as const).entries()) {
        const q = cred.queues[k]!.id;
        const subscriptionId = await subscribe(a!, cred.token, q, `latency-${which}`);
        const consumer = startConsumer((which === "same" ? a! : b!).url, cred.token, subscriptionId);
        const c = new LeanClient(a!.url, cred.token, MAX_SUBMITTING + WORKERS);
        const workers = startWorkers(driver, c, a!, cred.token, q);
        try {
          const pids: Record<string, number | undefined> = {
            nodeA: a!.pid,
            nodeB: b!.pid,
            mariadb: mariadbPid(),
            consumer: consumer.pid,
          };
          if (workers.pid !== undefined) pids.worker = workers.pid;
          const roundTrips = async () => (await a!.roundTrips()) + (await b!.roundTrips());
          const rt0 = await roundTrips();
          const measured = await withDbCounters(o.mysqlUrl, () =>
            withCpu(pids, () => round(c, workers, q, consumer, n, which, rate), `pipeline-latency-${which}`),
          );
          const rt = (await roundTrips()) - rt0;
          const { round: r, finish } = measured.result.result;
          await finish();
          const l = latencies(r, r.firstSubmitAt + warmupSeconds * 1000);
          out[which] = {
            p50Ms: percentile(l, 50),
            p99Ms: percentile(l, 99),
            maxMs: l[l.length - 1],
            samples: l.length,
            // What the producers achieved, and the whole pipeline: submits and ACKed deliveries per second.
            submittedPerSec: Math.round(n / ((r.lastSubmittedAt - r.firstSubmitAt) / 1000)),
            deliveredPerSec: Math.round(n / ((r.consumer.lastAckAt - r.firstSubmitAt) / 1000)),
            cpu: measured.result.cpu,
            ...cpuPerTask(measured.result.cpu, n),
            databasePerTask: { ...perItem(measured.counters, n), roundTrips: Math.round((rt / n) * 100) / 100 },
          };
        } finally {
          c.close();
          await workers.close();
          await consumer.stop();
        }
      }
      return {
        ratePerSec: rate,
        seconds,
        warmupSeconds,
        tasks: n,
        driver,
        consumer: "SDK Consumer, capacity 32, a process of its own",
        sameNode: out.same!,
        otherNode: out.other!,
      };
    },
    {},
    { countRoundTrips: true },
  );
}

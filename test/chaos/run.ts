// `npm run chaos -- --seed S --minutes M`: a randomised fault run with a history checker
// (docs/testing.md). It starts a MariaDB of its own, three `orbit
// serve` nodes (each reaching the database through a proxy that can cut or stall it, each
// with its clock skewed), producers, SDK workers and Inbox consumers, and for M minutes
// lets the seed's schedule (schedule.ts) kill, freeze and restart them and the database.
// Then it heals everything, waits for the system to settle, checks the history
// (check.ts), prints `N passed, M failed` and exits 1 when a check failed.
import path from "node:path";
import { pathToFileURL } from "node:url";
import mysql from "mysql2/promise";
import { client } from "../helpers/api.js";
import { bootstrap, ORBIT_BIN } from "../helpers/orbit.js";
import { startProxy, type Proxy } from "../helpers/proxy.js";
import { ChaosDatabase } from "./mariadb.js";
import { Managed } from "./processes.js";
import { describe, plan, type Fault } from "./schedule.js";
import { newHistory, Traffic } from "./traffic.js";
import { checkHistory, report, type Subscription } from "./check.js";
import { freePort } from "../helpers/ports.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const here = path.resolve(process.cwd(), "dist/test/chaos");
const CAST = { nodes: 3, consumers: 4, workers: 2 } as const;
/** Short leases, so that a killed holder's work comes back within the run. */
const NODE_ENV = {
  ORBIT_HOST: "127.0.0.1",
  ORBIT_LEASE_DURATION_MS: "3000",
  ORBIT_WORKER_LEASE_MS: "3000",
  ORBIT_IDLE_TIMEOUT_MS: "12000",
};
/** How long the system gets, once healed, to finish every task and delivery. */
const SETTLE_MS = 180_000;

function args(argv: string[]): { seed: number; minutes: number } {
  const value = (name: string) => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const seed = Number(value("--seed") ?? Math.floor(Math.random() * 2 ** 31));
  const minutes = Number(value("--minutes") ?? 10);
  if (!Number.isSafeInteger(seed) || seed < 0) throw new Error("--seed takes a whole number");
  if (!(minutes > 0)) throw new Error("--minutes takes a positive number");
  return { seed, minutes };
}

async function main(): Promise<number> {
  const { seed, minutes } = args(process.argv.slice(2));
  const started = Date.now();
  const say = (line: string) => process.stdout.write(`[${((Date.now() - started) / 1000).toFixed(1)}s] ${line}\n`);
  say(`chaos run: seed ${seed}, ${minutes} min; replay with: npm run chaos -- --seed ${seed} --minutes ${minutes}`);
  const { skews, faults } = plan(seed, minutes * 60_000, CAST);

  const db = await ChaosDatabase.create(await freePort());
  let failed = 1;
  const cleanup: (() => Promise<unknown>)[] = [];
  try {
    const cred = await bootstrap(db.url("orbit_chaos"), {
      namespace: "chaos",
      application: "chaos",
      queues: ["work"],
      eventAccess: true,
    });
    const queueId = cred.queues[0]!.id;
    const proxies: Proxy[] = [];
    for (let k = 0; k < CAST.nodes; k++) proxies.push(await startProxy(db.port));
    cleanup.push(() => Promise.all(proxies.map((p) => p.close())));
    const history = newHistory();
    const nodeErrors: string[] = [];
    const seen = { unavailable: 0, applied: 0, duplicates: 0 };
    const ports = await Promise.all(skews.map(() => freePort()));
    const urls = ports.map((p) => `http://127.0.0.1:${p}`);
    const nodes = skews.map(
      (skew, k) =>
        new Managed({
          name: `node ${k}`,
          args: [ORBIT_BIN, "serve"],
          env: () => ({
            ...NODE_ENV,
            ORBIT_PORT: String(ports[k]),
            ORBIT_DATABASE_URL: `mysql://root@127.0.0.1:${proxies[k]!.port}/orbit_chaos`,
            ORBIT_CHAOS_CLOCK_SKEW_MS: String(skews[k]),
            NODE_OPTIONS: `--import=${pathToFileURL(path.join(here, "skew-preload.js")).href}`,
          }),
          readyWhen: (l) => l.includes('"msg":"listening"'),
          onLine: (l) => {
            if (/"level":"error"/.test(l) || /"status":5(?!03)\d\d/.test(l)) nodeErrors.push(`node ${k}: ${l}`);
            else if (l.includes('"status":503')) seen.unavailable++;
          },
        }),
    );
    cleanup.push(() => Promise.all(nodes.map((n) => n.kill("SIGKILL"))));
    await Promise.all(nodes.map((n) => n.start()));
    say(`MariaDB on port ${db.port}; nodes on ${ports.join(", ")}, clocks ${skews.map((s) => `${s} ms`).join(", ")}`);

    // Two subscriptions: one with the default attempt budget, one of 1, so that a lease that runs out leaves its delivery EXPIRED.
    const subscriptions: Subscription[] = [];
    for (const [name, budget] of [
      ["all", undefined],
      ["tight", 1],
    ] as const) {
      const res = await client(urls[0]!, cred.token).post("/v1/subscriptions", {
        name,
        queue_id: queueId,
        ...(budget ? { max_attempts: budget } : {}),
      });
      if (res.status !== 201) throw new Error(`subscription ${name}: ${res.status} ${res.text}`);
      subscriptions.push({ id: res.json.data.subscription.id as string, inbox: `chaos_inbox_${name}` });
    }
    const consumers = Array.from(
      { length: CAST.consumers },
      (_, c) =>
        new Managed({
          name: `consumer ${c}`,
          args: [path.resolve(process.cwd(), "dist/examples/inbox/consumer.js")],
          env: () => ({
            ORBIT_URL: (c % 2 === 0 ? urls : [...urls].reverse()).join(","),
            ORBIT_TOKEN: cred.token,
            SUBSCRIPTION_ID: subscriptions[c % subscriptions.length]!.id,
            INBOX_DATABASE_URL: db.url(subscriptions[c % subscriptions.length]!.inbox),
            CAPACITY: "4",
          }),
          readyWhen: (l) => l.startsWith("consuming subscription "),
          onLine: (l) => {
            if (l.startsWith("applied ")) seen.applied++;
            else if (l.startsWith("duplicate, skipped ")) seen.duplicates++;
            const ack = /^ACK confirmed ([0-9a-f]{32}) epoch ([0-9]+)$/.exec(l);
            if (ack) {
              const epochs = history.acksConfirmed.get(ack[1]!) ?? new Set<string>();
              history.acksConfirmed.set(ack[1]!, epochs.add(ack[2]!));
            }
          },
        }),
    );
    const workers = Array.from(
      { length: CAST.workers },
      (_, w) =>
        new Managed({
          name: `worker ${w}`,
          args: [path.join(here, "worker-child.js")],
          env: () => ({ ORBIT_URL: urls[w % urls.length]!, ORBIT_TOKEN: cred.token, QUEUE_ID: queueId }),
          readyWhen: (l) => l.startsWith("working queue "),
        }),
    );
    cleanup.push(() => Promise.all([...consumers, ...workers].map((p) => p.kill("SIGKILL"))));
    await Promise.all([...consumers, ...workers].map((p) => p.start()));

    const traffic = new Traffic(urls, cred.token, queueId, seed, history);
    traffic.start(2, 10);
    say(`traffic started; ${faults.length} faults planned`);

    const apply = async (f: Fault): Promise<void> => {
      switch (f.kind) {
        case "kill-node":
          await nodes[f.target]!.kill("SIGKILL");
          await sleep(f.downMs);
          skews[f.target] = f.skewMs;
          return nodes[f.target]!.start();
        case "restart-node":
          await nodes[f.target]!.kill("SIGTERM");
          skews[f.target] = f.skewMs;
          return nodes[f.target]!.start();
        case "freeze-node":
          nodes[f.target]!.freeze();
          await sleep(f.forMs);
          return nodes[f.target]!.thaw();
        case "kill-consumer":
        case "kill-worker": {
          const p = (f.kind === "kill-worker" ? workers : consumers)[f.target]!;
          await p.kill("SIGKILL");
          await sleep(f.downMs);
          return p.start();
        }
        case "freeze-consumer":
          consumers[f.target]!.freeze();
          await sleep(f.forMs);
          return consumers[f.target]!.thaw();
        case "cut-database":
          proxies[f.target]!.cut();
          await sleep(f.forMs);
          return proxies[f.target]!.restore();
        case "stall-database":
          proxies[f.target]!.hold();
          await sleep(f.forMs);
          return proxies[f.target]!.release();
        case "lose-commit-answer":
          proxies[f.target]!.stallWhen("COMMIT");
          await sleep(2000);
          proxies[f.target]!.cutStalled();
          return proxies[f.target]!.release();
        case "crash-database":
          await db.crash();
          await sleep(f.downMs);
          return db.start();
      }
    };
    const running: Promise<void>[] = [];
    /** Faults that could not be carried out or undone (a process that would not start again). */
    const faultFailures: string[] = [];
    const t0 = Date.now();
    for (const { atMs, fault } of faults) {
      await sleep(t0 + atMs - Date.now());
      say(describe(fault));
      running.push(
        apply(fault).catch((e: unknown) => {
          faultFailures.push(`${describe(fault)}: ${e instanceof Error ? e.message : String(e)}`);
        }),
      );
    }
    await sleep(t0 + minutes * 60_000 - Date.now());
    await Promise.all(running);
    // Whatever a crash left down comes back, as its supervisor would bring it.
    for (const r of await Promise.allSettled([...nodes, ...consumers, ...workers].map((p) => p.start())))
      if (r.status === "rejected") faultFailures.push(`healing: ${String(r.reason)}`);
    await traffic.stop();
    say(
      `faults over: ${history.submitted.size} tasks submitted, ${history.completed.size} completed by the plain worker, ${history.cancelled.size} cancelled, ${history.retries} requests retried`,
    );

    const admin = await mysql.createConnection({
      uri: db.url("orbit_chaos"),
      supportBigNumbers: true,
      bigNumberStrings: true,
    });
    cleanup.push(() => admin.end());
    const settled = await settle(
      admin,
      subscriptions.map((s) => s.id),
    );
    say(settled ? "settled" : `not settled after ${SETTLE_MS / 1000} s`);
    const [states] = await admin.query<mysql.RowDataPacket[]>(
      "SELECT subscription_id, state, COUNT(*) AS n FROM deliveries GROUP BY subscription_id, state ORDER BY 1, 2",
    );
    const bySubscription = subscriptions.map(
      (s) =>
        `${s.inbox}: ${states
          .filter((r) => r.subscription_id === s.id)
          .map((r) => `${r.n} ${r.state}`)
          .join(", ")}`,
    );
    say(
      `deliveries ${bySubscription.join("; ")}; the Inbox consumers applied ${seen.applied} and skipped ${seen.duplicates} duplicates; the nodes answered 503 ${seen.unavailable} times`,
    );
    // Stopped as their operators would: the consumers save their unconfirmed proofs.
    await Promise.all([...consumers, ...workers].map((p) => p.kill("SIGTERM")));
    const checks = await checkHistory(admin, {
      namespaceId: cred.namespace_id,
      subscriptions,
      history,
      nodeErrors,
      unexpectedExits: [...nodes, ...consumers, ...workers].flatMap((p) => p.unexpectedExits),
    });
    checks.unshift(
      { name: "every fault was carried out and undone", problems: faultFailures },
      { name: "everything settled once the faults were over", problems: settled ? [] : ["see the checks below"] },
    );
    const out = report(checks);
    for (const line of out.lines) process.stdout.write(`${line}\n`);
    failed = out.failed;
    const restarts = [...nodes, ...consumers, ...workers].reduce((s, p) => s + p.failedStarts, 0);
    say(`MariaDB started ${db.starts} times; ${restarts} process starts were tried again (their database down)`);
    if (failed > 0) say(`seed ${seed}: npm run chaos -- --seed ${seed} --minutes ${minutes}`);
    return failed > 0 ? 1 : 0;
  } finally {
    for (const c of cleanup.reverse()) await c().catch(() => undefined);
    await db.remove(failed > 0);
    if (failed > 0) process.stdout.write(`the database's files are kept in ${db.dir}\n`);
  }
}

/** Waits until every task ended, every event is numbered and delivered, and no delivery is open. */
async function settle(db: mysql.Connection, subscriptionIds: string[]): Promise<boolean> {
  const until = Date.now() + SETTLE_MS;
  while (Date.now() < until) {
    const [[row]] = await db.query<mysql.RowDataPacket[]>(
      `SELECT (SELECT COUNT(*) FROM tasks WHERE state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')) AS open_tasks,
              (SELECT COUNT(*) FROM result_events WHERE sequence IS NULL) AS unnumbered,
              (SELECT COUNT(*) FROM deliveries WHERE state IN ('PENDING', 'LEASED')) AS open_deliveries,
              (SELECT COUNT(*) FROM subscriptions s WHERE s.id IN (?) AND s.cursor_sequence <
                 (SELECT COALESCE(MAX(sequence), 0) FROM result_events e WHERE e.queue_id = s.queue_id AND e.type <> 'task.requeued')) AS behind`,
      [subscriptionIds],
    );
    if (Number(row!.open_tasks) + Number(row!.unnumbered) + Number(row!.open_deliveries) + Number(row!.behind) === 0)
      return true;
    await sleep(1000);
  }
  return false;
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`chaos run failed to run: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(2);
  },
);

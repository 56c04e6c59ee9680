// The node's periodic work. Each job is cheap when there is nothing to do (one indexed
// query), so an idle node costs about 1.4 queries/s for all of them together:
//   - every 1 s: recover worker attempts whose lease ran out (any node may; SKIP LOCKED
//     keeps them from stepping on each other);
//   - every 5 s (ORBIT_SEQUENCER_SWEEP_MS): number events that a node committed but could
//     not number (it died);
//   - every 15 s (ORBIT_METRICS_REFRESH_MS), and once at start: read the database gauges
//     of /metrics, so that a scrape costs no query (domain/usage-metrics.ts);
//   - every 60 s, when ORBIT_RETENTION is set: purge events older than it;
//   - every 60 s, and once at start: delete receipts, audit records, event sessions and
//     finished tasks past their retention, in small batches (domain/housekeeping.ts).
import type { Pool } from "./db/types.js";
import { selectNamespaceIds } from "./db/queries/result-log.js";
import { purgeOlderThan } from "./domain/result-log.js";
import { afterCommit, type NodeServices } from "./domain/services.js";
import { expireDue } from "./domain/worker.js";
import { sweepExpired, type HousekeepingCursor } from "./domain/housekeeping.js";
import type { HousekeepingRetention } from "./config/index.js";
import { describeError, type Logger } from "./log/index.js";
import { refreshDatabaseGauges } from "./domain/usage-metrics.js";
import { refreshStarted } from "./metrics.js";

export const EXPIRY_SWEEP_MS = 1000;
export const RETENTION_SWEEP_MS = 60_000;

export interface Background {
  stop(): Promise<void>;
}

export interface BackgroundSettings {
  readonly sequencerSweepMs: number;
  readonly retentionMs: number | undefined;
  readonly housekeeping: HousekeepingRetention;
  readonly metricsRefreshMs: number;
}

export function startBackground(
  pool: Pool,
  services: NodeServices,
  log: Logger,
  settings: BackgroundSettings,
): Background {
  const { retentionMs } = settings;
  const running = new Set<Promise<void>>();
  const timers: NodeJS.Timeout[] = [];
  /** `now`: also run once at start. A run still going when the next is due skips that one. */
  const every = (ms: number, name: string, job: () => Promise<void>, now = false) => {
    let busy = false;
    const run = () => {
      if (busy) return;
      busy = true;
      const p = job()
        .catch((e) => log.log("warn", `${name} failed`, describeError(e)))
        .finally(() => {
          busy = false;
          running.delete(p);
        });
      running.add(p);
    };
    timers.push(setInterval(run, ms));
    if (now) run();
  };
  every(EXPIRY_SWEEP_MS, "attempt expiry", async () => {
    const effects = await expireDue(pool);
    afterCommit(services, effects.namespaces, effects.queues);
  });
  every(settings.sequencerSweepMs, "sequencer sweep", () => services.sequencer.sweep());
  refreshStarted();
  every(
    settings.metricsRefreshMs,
    "metrics refresh",
    async () => {
      const started = process.hrtime.bigint();
      const { subscriptions } = await refreshDatabaseGauges(pool);
      const ms = Number((process.hrtime.bigint() - started) / 1000n) / 1000;
      log.log("debug", "metrics refreshed", { subscriptions, duration_ms: ms });
    },
    true,
  );
  if (retentionMs !== undefined) {
    every(RETENTION_SWEEP_MS, "retention", async () => {
      for (const ns of await selectNamespaceIds(pool)) await purgeOlderThan(pool, ns, retentionMs);
    });
  }
  const housekeeping: HousekeepingCursor = { taskAfter: "" };
  every(
    RETENTION_SWEEP_MS,
    "housekeeping",
    async () => {
      const { failed, ...deleted } = await sweepExpired(pool, settings.housekeeping, Date.now(), housekeeping);
      if (failed.length > 0) log.log("warn", "housekeeping failed", { kinds: failed.join(",") });
      if (deleted.receipts + deleted.audits + deleted.sessions + deleted.tasks > 0)
        log.log("info", "housekeeping", { ...deleted });
    },
    true,
  );
  return {
    async stop() {
      for (const t of timers) clearInterval(t);
      await Promise.all(running);
      await services.sequencer.idle();
    },
  };
}

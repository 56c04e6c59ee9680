// The node's periodic work. Each job is cheap when there is nothing to do (one indexed
// query), so an idle node costs about 1.3 queries/s for all of them together:
//   - every 1 s: recover worker attempts whose lease ran out (any node may; SKIP LOCKED
//     keeps them from stepping on each other);
//   - every 5 s (ORBIT_SEQUENCER_SWEEP_MS): number events that a node committed but could
//     not number (it died);
//   - every 60 s, when ORBIT_RETENTION is set: purge events older than it.
import type { Pool } from "./db/types.js";
import { selectNamespaceIds } from "./db/queries/result-log.js";
import { purgeOlderThan } from "./domain/result-log.js";
import { afterCommit, type NodeServices } from "./domain/services.js";
import { expireDue } from "./domain/worker.js";
import { describeError, type Logger } from "./log/index.js";

export const EXPIRY_SWEEP_MS = 1000;
export const RETENTION_SWEEP_MS = 60_000;

export interface Background {
  stop(): Promise<void>;
}

export interface BackgroundSettings {
  readonly sequencerSweepMs: number;
  readonly retentionMs: number | undefined;
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
  const every = (ms: number, name: string, job: () => Promise<void>) => {
    let busy = false;
    timers.push(
      setInterval(() => {
        if (busy) return;
        busy = true;
        const p = job()
          .catch((e) => log.log("warn", `${name} failed`, describeError(e)))
          .finally(() => {
            busy = false;
            running.delete(p);
          });
        running.add(p);
      }, ms),
    );
  };
  every(EXPIRY_SWEEP_MS, "attempt expiry", async () => {
    const effects = await expireDue(pool);
    afterCommit(services, effects.namespaces, effects.queues);
  });
  every(settings.sequencerSweepMs, "sequencer sweep", () => services.sequencer.sweep());
  if (retentionMs !== undefined) {
    every(RETENTION_SWEEP_MS, "retention", async () => {
      for (const ns of await selectNamespaceIds(pool)) await purgeOlderThan(pool, ns, retentionMs);
    });
  }
  return {
    async stop() {
      for (const t of timers) clearInterval(t);
      await Promise.all(running);
      await services.sequencer.idle();
    },
  };
}

// Shared bits of the benchmark's measurements: options, CPU accounting, percentiles.
import { monitorEventLoopDelay } from "node:perf_hooks";

export interface BenchOptions {
  /** The ~2-minute run: shorter windows, one run instead of the median of three. */
  quick: boolean;
  /** Server URL without a database, e.g. mysql://root@127.0.0.1:3306. */
  mysqlUrl: string;
}

/**
 * CPU seconds (user + system) this process has used so far. The benchmark's clients share
 * the machine's two cores with the database and the nodes, so each measurement reports the
 * difference over its window: that is how much of the machine the client itself took.
 */
export function cpuSeconds(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

/** Nearest-rank percentile (p in 0..100) of an ascending array; NaN when it is empty. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

/** How often loopDelay samples: its samples are the time between two ticks of this timer. */
const LOOP_SAMPLE_MS = 5;

/**
 * Watches this process's event loop; `read()` gives how late its timer ran, in ms (p50, p99,
 * max). The histogram holds the time between ticks, whose floor is the sampling interval
 * itself (nodejs/node#62935): that interval is taken off, so an idle loop reads 0.
 */
export function loopDelay(): { read(): { p50: number; p99: number; max: number } } {
  const h = monitorEventLoopDelay({ resolution: LOOP_SAMPLE_MS });
  h.enable();
  const late = (ns: number) => Math.max(0, Math.round((ns / 1e6 - LOOP_SAMPLE_MS) * 10) / 10);
  return {
    read() {
      h.disable();
      return { p50: late(h.percentile(50)), p99: late(h.percentile(99)), max: late(h.max) };
    },
  };
}

/** The key of the line a node started with countRoundTrips prints on SIGUSR2 (round-trips.ts). */
export const ROUND_TRIPS_KEY = "bench_round_trips";

// Shared bits of the benchmark's measurements: options, CPU accounting, percentiles.

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

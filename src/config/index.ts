// Configuration, read once from the environment, validated and frozen
// (docs/configuration.md). Only the entry point calls loadConfig;
// everything else receives the frozen object.
import { ConfigError } from "./errors.js";
import { DEFAULT_DB_POOL_SIZE, MANAGEMENT_TIMEOUT_MS, METRICS_REFRESH_MS, SEQUENCER_SWEEP_MS } from "./limits.js";
import { parseTrustedProxies, type Subnet } from "./trusted-proxies.js";
import type { LogLevel } from "../log/index.js";

export { ConfigError } from "./errors.js";
export type { Subnet } from "./trusted-proxies.js";

export interface Config {
  readonly databaseUrl: string;
  /** Whether a node takes the database's Unix socket when the URL names this host (db/local-socket.ts). */
  readonly databaseSocket: "auto" | "off";
  readonly host: string;
  readonly port: number;
  readonly leaseDurationMs: number;
  readonly helloTimeoutMs: number;
  readonly idleTimeoutMs: number;
  readonly maxConnections: number;
  /** Event connections of one application on a node; the node's limit unless set lower. */
  readonly maxConnectionsPerApplication: number;
  readonly workerLeaseMs: number;
  /** QUEUED tasks a namespace may have before a submit is refused (429); undefined: no limit. */
  readonly maxQueuedTasksPerNamespace: number | undefined;
  readonly requestTimeoutMs: number;
  readonly dbPoolSize: number;
  /** How often the node numbers events whose numbering was never started (background.ts). */
  readonly sequencerSweepMs: number;
  /** Optional age-based retention of the result log, in ms; undefined keeps everything. */
  readonly retentionMs: number | undefined;
  /** Ages past which receipts, audit records, event sessions and finished tasks are deleted (housekeeping.ts). */
  readonly housekeeping: HousekeepingRetention;
  /** A listener of its own for GET /metrics (edge/metrics-listener.ts); undefined: the main port serves it. */
  readonly metricsPort: number | undefined;
  readonly metricsHost: string;
  /** How often the node reads the database gauges of /metrics (background.ts). */
  readonly metricsRefreshMs: number;
  /** Lines below this level are not written. */
  readonly logLevel: LogLevel;
  /** The proxies whose X-Forwarded-For is believed (edge/client-address.ts); empty: none. */
  readonly trustedProxies: readonly Subnet[];
}

export const DEFAULT_DATABASE_URL = "mysql://root@127.0.0.1:3306/orbit";

type Env = Readonly<Record<string, string | undefined>>;

function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!/^(0|[1-9][0-9]*)$/.test(raw)) throw new ConfigError(`${name} must be a whole number, got "${raw}"`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${n}`);
  return n;
}

/** ORBIT_RETENTION: a duration such as "30d", "12h", "90m" or "3600s". */
export function parseRetention(raw: string | undefined, name = "ORBIT_RETENTION"): number | undefined {
  if (raw === undefined || raw === "") return undefined;
  const m = /^([1-9][0-9]{0,6})(s|m|h|d)$/.exec(raw);
  if (!m) throw new ConfigError(`${name} must look like 30d, 12h, 90m or 3600s, got "${raw}"`);
  const unit = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] as "s" | "m" | "h" | "d"];
  return Number(m[1]) * unit;
}

/**
 * The driver decodes the user, password and database name: a malformed escape there would
 * fail every command with a bare "URI malformed". Never echoes the URL (its password).
 */
function checkPercentEncoding(databaseUrl: string): void {
  let u: URL;
  try {
    u = new URL(databaseUrl);
  } catch {
    throw new ConfigError("ORBIT_DATABASE_URL is not a URL");
  }
  try {
    for (const part of [u.username, u.password, u.pathname]) decodeURIComponent(part);
  } catch {
    throw new ConfigError("ORBIT_DATABASE_URL has malformed percent-encoding");
  }
}

const LOG_LEVELS: readonly LogLevel[] = ["debug", "info", "warn", "error"];

function logLevel(raw: string | undefined): LogLevel {
  if (raw === undefined || raw === "") return "info";
  if (!(LOG_LEVELS as readonly string[]).includes(raw))
    throw new ConfigError(`ORBIT_LOG_LEVEL must be debug, info, warn or error, got ${JSON.stringify(raw)}`);
  return raw as LogLevel;
}

/**
 * ORBIT_METRICS_PORT: unset serves /metrics on the main port. A fixed port equal to
 * ORBIT_PORT would make the second listener fail to bind, so it is refused here, saying why.
 */
function metricsPort(env: Env, port: number): number | undefined {
  if (env.ORBIT_METRICS_PORT === undefined || env.ORBIT_METRICS_PORT === "") return undefined;
  const n = int(env, "ORBIT_METRICS_PORT", 0, 0, 65535);
  if (n !== 0 && n === port) throw new ConfigError(`ORBIT_METRICS_PORT must differ from ORBIT_PORT, both are ${n}`);
  return n;
}

/** Ages past which a node's sweep deletes receipts, audit records, event sessions and finished tasks. */
export interface HousekeepingRetention {
  /** Idempotency keys with their receipts (ORBIT_RECEIPT_RETENTION). */
  readonly receiptMs: number;
  /** Audit records (ORBIT_AUDIT_RETENTION). */
  readonly auditMs: number;
  /** Closed event sessions (ORBIT_SESSION_RETENTION). */
  readonly sessionMs: number;
  /** Finished tasks with their attempts (ORBIT_TASK_RETENTION). */
  readonly taskMs: number;
}

export function loadConfig(env: Env = process.env): Config {
  const databaseUrl = env.ORBIT_DATABASE_URL || DEFAULT_DATABASE_URL;
  if (!/^mysql:\/\//.test(databaseUrl)) throw new ConfigError("ORBIT_DATABASE_URL must start with mysql://");
  checkPercentEncoding(databaseUrl);
  const socket = env.ORBIT_DATABASE_SOCKET || "auto";
  if (socket !== "auto" && socket !== "off")
    throw new ConfigError(`ORBIT_DATABASE_SOCKET must be auto or off, got "${socket}"`);
  const host = env.ORBIT_HOST || "127.0.0.1";
  const port = int(env, "ORBIT_PORT", 8080, 0, 65535);
  const maxConnections = int(env, "ORBIT_MAX_CONNECTIONS", 128, 1, 100_000);
  return Object.freeze({
    databaseUrl,
    databaseSocket: socket,
    host,
    port,
    leaseDurationMs: int(env, "ORBIT_LEASE_DURATION_MS", 30000, 100, 3_600_000),
    helloTimeoutMs: int(env, "ORBIT_HELLO_TIMEOUT_MS", 5000, 50, 600_000),
    idleTimeoutMs: int(env, "ORBIT_IDLE_TIMEOUT_MS", 60000, 100, 3_600_000),
    maxConnections,
    maxConnectionsPerApplication: int(env, "ORBIT_MAX_CONNECTIONS_PER_APPLICATION", maxConnections, 1, 100_000),
    workerLeaseMs: int(env, "ORBIT_WORKER_LEASE_MS", 60000, 100, 86_400_000),
    maxQueuedTasksPerNamespace: env.ORBIT_MAX_QUEUED_TASKS_PER_NAMESPACE
      ? int(env, "ORBIT_MAX_QUEUED_TASKS_PER_NAMESPACE", 0, 1, 1_000_000_000)
      : undefined,
    requestTimeoutMs: int(env, "ORBIT_REQUEST_TIMEOUT_MS", MANAGEMENT_TIMEOUT_MS, 50, 600_000),
    dbPoolSize: int(env, "ORBIT_DB_POOL_SIZE", DEFAULT_DB_POOL_SIZE, 1, 64),
    sequencerSweepMs: int(env, "ORBIT_SEQUENCER_SWEEP_MS", SEQUENCER_SWEEP_MS, 100, 3_600_000),
    retentionMs: parseRetention(env.ORBIT_RETENTION),
    housekeeping: Object.freeze({
      receiptMs: parseRetention(env.ORBIT_RECEIPT_RETENTION || "7d", "ORBIT_RECEIPT_RETENTION")!,
      auditMs: parseRetention(env.ORBIT_AUDIT_RETENTION || "365d", "ORBIT_AUDIT_RETENTION")!,
      sessionMs: parseRetention(env.ORBIT_SESSION_RETENTION || "7d", "ORBIT_SESSION_RETENTION")!,
      taskMs: parseRetention(env.ORBIT_TASK_RETENTION || "30d", "ORBIT_TASK_RETENTION")!,
    }),
    metricsPort: metricsPort(env, port),
    metricsHost: env.ORBIT_METRICS_HOST || host,
    metricsRefreshMs: int(env, "ORBIT_METRICS_REFRESH_MS", METRICS_REFRESH_MS, 100, 3_600_000),
    logLevel: logLevel(env.ORBIT_LOG_LEVEL),
    trustedProxies: Object.freeze(parseTrustedProxies(env.ORBIT_TRUSTED_PROXIES)),
  });
}

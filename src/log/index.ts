// Structured logging: one JSON object per line on stdout. Callers pass fields, never
// raw errors, headers or bodies, so that no token, lease secret, SQL text or stack trace
// can reach a log line by accident; describeError() is the one way to log an error.
import { hostname } from "node:os";

export type LogLevel = "debug" | "info" | "warn" | "error";
export type LogFields = Readonly<Record<string, string | number | boolean | null | undefined>>;

export interface Logger {
  log(level: LogLevel, msg: string, fields?: LogFields): void;
}

const RANK: Readonly<Record<LogLevel, number>> = { debug: 0, info: 1, warn: 2, error: 3 };

/**
 * Lines below `minimum` are dropped. Each line names its process and host, so that the
 * lines of several nodes (and of a node restarted) can be told apart once collected.
 */
export function jsonLogger(
  minimum: LogLevel = "info",
  write: (line: string) => void = (l) => process.stdout.write(l),
): Logger {
  const origin = { pid: process.pid, hostname: hostname() };
  return {
    log(level, msg, fields = {}) {
      if (RANK[level] < RANK[minimum]) return;
      write(JSON.stringify({ time: new Date().toISOString(), level, msg, ...origin, ...fields }) + "\n");
    },
  };
}

export const silentLogger: Logger = { log() {} };

/**
 * The loggable part of an error: its class and its codes. The message is left out on
 * purpose: driver messages can quote SQL and values.
 */
export function describeError(e: unknown): LogFields {
  if (e === null || typeof e !== "object") return { err: typeof e };
  const o = e as { name?: unknown; code?: unknown; errno?: unknown };
  return {
    err: typeof o.name === "string" ? o.name : "Error",
    err_code: typeof o.code === "string" ? o.code : undefined,
    errno: typeof o.errno === "number" ? o.errno : undefined,
  };
}

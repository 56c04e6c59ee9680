// Structured logging: one JSON object per line on stdout. Callers pass fields, never
// raw errors, headers or bodies, so that no token, lease secret, SQL text or stack trace
// can reach a log line by accident; describeError() is the one way to log an error.
export type LogLevel = "debug" | "info" | "warn" | "error";
export type LogFields = Readonly<Record<string, string | number | boolean | null | undefined>>;

export interface Logger {
  log(level: LogLevel, msg: string, fields?: LogFields): void;
}

export function jsonLogger(write: (line: string) => void = (l) => process.stdout.write(l)): Logger {
  return {
    log(level, msg, fields = {}) {
      write(JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields }) + "\n");
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

import { loadConfig } from "../config/index.js";
import { jsonLogger } from "../log/index.js";
import { SHUTDOWN_GRACE_MS, startServer } from "../server.js";
import { flag, parse } from "./args.js";

const HELP = `Usage: orbit serve [--no-migrate]

Runs a node: applies pending migrations (unless --no-migrate; a database newer than this
code is refused either way, exit 1), then serves the HTTP API and the WebSocket event
endpoint on ORBIT_HOST:ORBIT_PORT until SIGTERM or SIGINT. On the signal it stops accepting, lets in-flight work finish (at most 10 s), closes event
connections with 1001, closes the database pool and exits 0 — within 11 s even when the
database stops answering (work still stuck then is left, and the log says so); a second
signal exits at once with 1. Logs one JSON line per request on stdout, WebSocket
upgrades included (request id, route, status, duration, client address, credential id;
never a token or secret). Several nodes on one database form one cluster.

Environment (defaults): ORBIT_DATABASE_URL (mysql://root@127.0.0.1:3306/orbit),
ORBIT_DATABASE_SOCKET (auto: the database's Unix socket when it is on this host; off),
ORBIT_HOST (127.0.0.1), ORBIT_PORT (8080; 0 picks a free port), ORBIT_LEASE_DURATION_MS
(30000), ORBIT_HELLO_TIMEOUT_MS (5000), ORBIT_IDLE_TIMEOUT_MS (60000),
ORBIT_MAX_CONNECTIONS (128), ORBIT_MAX_CONNECTIONS_PER_APPLICATION (the node's limit),
ORBIT_WORKER_LEASE_MS (60000), ORBIT_MAX_QUEUED_TASKS_PER_NAMESPACE (unset: no limit;
set: a submit to a namespace with that many QUEUED tasks is 429),
ORBIT_REQUEST_TIMEOUT_MS (8000), ORBIT_DB_POOL_SIZE (8),
ORBIT_SEQUENCER_SWEEP_MS (5000),
ORBIT_RETENTION (unset: keep the whole result log), ORBIT_RECEIPT_RETENTION (7d),
ORBIT_AUDIT_RETENTION (365d), ORBIT_SESSION_RETENTION (7d: event sessions),
ORBIT_TASK_RETENTION (30d: finished tasks), ORBIT_METRICS_PORT (unset: /metrics
on ORBIT_PORT; set: on a listener of its own, 0 picks a free port), ORBIT_METRICS_HOST
(ORBIT_HOST), ORBIT_METRICS_REFRESH_MS (15000), ORBIT_LOG_LEVEL (info; debug, warn,
error), ORBIT_TRUSTED_PROXIES (unset: believe no X-Forwarded-For; a comma list of IPs,
CIDR blocks and loopback).
`;

/** In-flight requests get SHUTDOWN_GRACE_MS; closing the pools after them gets 1 s more. */
export const SHUTDOWN_DEADLINE_MS = SHUTDOWN_GRACE_MS + 1000;

export async function runServe(argv: string[]): Promise<number> {
  const v = parse(argv, { "no-migrate": { type: "boolean" } }, HELP);
  if (!v) return 0;
  const config = loadConfig();
  const log = jsonLogger(config.logLevel);
  // A log reader that goes away (a collector restarting, `orbit serve | head`) must not take
  // the node down: a write to a closed stdout fails with EPIPE, emitted as an 'error' event
  // that, unhandled, would crash the process with a stack trace. From then on log lines are
  // dropped and the node keeps serving.
  process.stdout.on("error", () => undefined);
  // Signals are handled from the start, so one that arrives while the node is still
  // starting stops it cleanly once it is up.
  let signals = 0;
  let stop!: () => void;
  const stopRequested = new Promise<void>((resolve) => (stop = resolve));
  const onSignal = (sig: NodeJS.Signals) => {
    signals++;
    if (signals > 1) {
      log.log("warn", "second signal: exiting now", { signal: sig });
      process.exit(1);
    }
    log.log("info", "shutting down", { signal: sig });
    // The whole shutdown is time-boxed: a database that stops answering never returns the
    // statements of a claim, an ACK, a periodic job or the pool's end, and the node would wait
    // for them for good. Unref'd: an orderly shutdown exits as soon as it is done.
    setTimeout(() => {
      log.log("warn", "shutdown deadline passed: exiting", { deadline_ms: SHUTDOWN_DEADLINE_MS });
      process.exit(0);
    }, SHUTDOWN_DEADLINE_MS).unref();
    stop();
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  const server = await startServer(config, log, { migrate: !flag(v, "no-migrate") });
  await stopRequested;
  await server.close();
  return 0;
}

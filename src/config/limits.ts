// Every limit of the protocol (docs/protocol.md, whose sections the §N below cite) and
// of tasks (docs/tasks.md), in one place.
// Timings that tests shorten live in config/index.ts; these never change at run time.

/** §1: JSON bodies, and §5: WebSocket frames, at most 512 KiB. */
export const MAX_BODY_BYTES = 512 * 1024;
export const MAX_FRAME_BYTES = 512 * 1024;
/** docs/tasks.md: task input, measured on the request's `input` as sent. */
export const MAX_TASK_INPUT_BYTES = 256 * 1024;
/**
 * openapi.yaml: a task's result, measured as the JSON string that carries it (task.result,
 * an event's snapshot.result), where its quotes and backslashes are escaped. Half the
 * frame limit, so every event.deliver frame fits within MAX_FRAME_BYTES.
 */
export const MAX_TASK_RESULT_BYTES = 256 * 1024;
/** §1: management requests time out on the server after 8 s. */
export const MANAGEMENT_TIMEOUT_MS = 8000;
/** §2: subscriptions per namespace. */
export const MAX_SUBSCRIPTIONS_PER_NAMESPACE = 64;
/** §5: claim pool: in flight globally, in flight per application, waiting plus in flight. */
export const CLAIM_POOL_GLOBAL = 4;
export const CLAIM_POOL_PER_APPLICATION = 1;
export const CLAIM_POOL_QUEUE = 128;
/** §5: per connection. */
export const READ_QUEUE_PER_CONNECTION = 4;
export const WRITE_QUEUE_PER_CONNECTION = 8;
export const CLAIMS_PER_SCAN_ROUND = 4;
/** §5: capacity of one event connection. */
export const MIN_CAPACITY = 1;
export const MAX_CAPACITY = 32;
/**
 * HTTP requests of one connection in processing at once (docs/http.md, "Deadlines and limits per connection"): a client
 * may pipeline, and Node starts every request it parses while no answer is written yet.
 */
export const HTTP_REQUESTS_PER_CONNECTION = 4;
/** §7: heartbeat the server advertises; the write timeout. */
export const HEARTBEAT_INTERVAL_MS = 15000;
/**
 * The heartbeat a node announces for its idle timeout: 15 s with the default 60 s, and a
 * quarter of a shorter one, so that a client pinging as told is never cut as idle
 * (ORBIT_IDLE_TIMEOUT_MS may be set below 15 s).
 */
export const heartbeatIntervalMs = (idleTimeoutMs: number): number =>
  Math.max(1, Math.min(HEARTBEAT_INTERVAL_MS, Math.floor(idleTimeoutMs / 4)));
export const WRITE_TIMEOUT_MS = 5000;
/** docs/tasks.md: a claim long-polls at most 20 s. */
export const MAX_CLAIM_WAIT_MS = 20000;
/** JSON nesting accepted in bodies and frames; deep enough for any real task input. */
export const MAX_JSON_DEPTH = 256;
/** A node's ACK transactions run on a pool of their own (server.ts). */
export const ACK_POOL_SIZE = 4;
/** So does its sequencer: one run per namespace at a time, 2 namespaces at once. */
export const SEQUENCER_POOL_SIZE = 2;
/** A few connections keep a 2-core database busy; many more only add contention. */
export const DEFAULT_DB_POOL_SIZE = 8;
/**
 * The sweep that numbers events whose numbering no pass started (their node died between
 * commit and numbering): an idle node's query every 5 s (ORBIT_SEQUENCER_SWEEP_MS).
 */
export const SEQUENCER_SWEEP_MS = 5000;
/**
 * Event-connection upgrades a node authenticates at once (each a credential lookup);
 * beyond them an upgrade is refused 503 before any database work, so a flood of upgrades
 * with made-up tokens costs the node at most this many lookups in flight.
 */
export const MAX_UPGRADES_AUTHENTICATING = 32;
/**
 * Pings of one event connection that re-check its credential and subscription, per
 * second; a ping beyond them is answered from the last check. A client pings every 15 s;
 * one that pings without pause costs the database at most this many checks a second.
 */
export const PING_CHECKS_PER_SECOND = 5;
/**
 * How often a node reads the database gauges of GET /metrics (background.ts): as often as
 * Prometheus' usual scrape interval, so a scrape is never more than one refresh behind,
 * at 2 queries a refresh whatever the scrape rate (ORBIT_METRICS_REFRESH_MS).
 */
export const METRICS_REFRESH_MS = 15_000;

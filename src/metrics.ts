// Prometheus metrics of a node (prom-client), exposed at GET /metrics. A leaf module:
// the layers that count import it; it imports nothing of the project.
// Two registries: `registry` names no tenant's object and is served wherever /metrics is;
// `subscriptionRegistry` labels series by subscription id, so it is served only on the
// operator's own metrics listener (ORBIT_METRICS_PORT), never on the port tenants reach.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";

export const registry = new Registry();
export const subscriptionRegistry = new Registry();
// Prometheus' own names for the process (process_*, nodejs_*): standard dashboards read them.
collectDefaultMetrics({ register: registry });

/** Always 1; its labels say what a node runs (set once at start-up). */
export const buildInfo = new Gauge({
  name: "orbit_build_info",
  help: "The version of Orbit and of Node.js this node runs (always 1).",
  labelNames: ["version", "nodejs"] as const,
  registers: [registry],
});

export const httpRequests = new Counter({
  name: "orbit_http_requests_total",
  help: "HTTP requests by operation and status.",
  labelNames: ["route", "status"] as const,
  registers: [registry],
});

export const httpDuration = new Histogram({
  name: "orbit_http_request_duration_seconds",
  help: "HTTP request duration by operation.",
  labelNames: ["route"] as const,
  buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 8, 30],
  registers: [registry],
});

export const eventConnections = new Gauge({
  name: "orbit_event_connections",
  help: "Open event connections on this node (bound or awaiting hello).",
  registers: [registry],
});

export const claimsInFlight = new Gauge({
  name: "orbit_claims_in_flight",
  help: "Claims running on this node.",
  registers: [registry],
});
export const claimsWaiting = new Gauge({
  name: "orbit_claims_waiting",
  help: "Connections waiting for a claim on this node.",
  registers: [registry],
});
/** A subscription's drain is about (deliveries per claim) / (claim duration): these two say which one to look at. */
export const claimDuration = new Histogram({
  name: "orbit_claim_duration_seconds",
  help: "Claim transaction duration, start to commit.",
  buckets: [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1],
  registers: [registry],
});
export const claimLeases = new Histogram({
  name: "orbit_claim_leases",
  help: "Deliveries leased by one claim (all the connections it served).",
  buckets: [0, 1, 2, 4, 8, 16, 32],
  registers: [registry],
});

/** Worker calls (complete, requeue) per transaction: batches form when calls arrive faster than commits (attempt-batches.ts). */
export const attemptBatchSize = new Histogram({
  name: "orbit_attempt_batch_size",
  help: "Worker calls (complete, requeue) committed together in one transaction.",
  buckets: [1, 2, 4, 8, 16, 32],
  registers: [registry],
});

export const attemptCallsWaiting = new Gauge({
  name: "orbit_attempt_calls_waiting",
  help: "Worker calls waiting for a batch: every batch slot is committing.",
  registers: [registry],
});

export const deliveries = new Counter({
  name: "orbit_deliveries_total",
  help: "Delivery transitions made by this node: created (materialised), leased, acked, expired (budget spent).",
  labelNames: ["stage"] as const,
  registers: [registry],
});

export const ackOutcomes = new Counter({
  name: "orbit_ack_outcomes_total",
  help: "ACK frames by outcome: acked, deduplicated, lease_lost.",
  labelNames: ["outcome"] as const,
  registers: [registry],
});

export const databaseErrors = new Counter({
  name: "orbit_database_errors_total",
  help: "Database failures seen by this node: unavailable (connection), conflict (deadlock after retries), other.",
  labelNames: ["kind"] as const,
  registers: [registry],
});

/**
 * Transactions run again after a deadlock or a lock wait timeout (tx.ts): each is a
 * transaction's work done twice, and a steady rate names a lock-order problem to fix.
 */
export const databaseRetries = new Counter({
  name: "orbit_database_retries_total",
  help: "Transactions run again after a retryable database error: deadlock, lock_wait_timeout.",
  labelNames: ["kind"] as const,
  registers: [registry],
});

// Every known label value starts at 0: a series that appears only with its first event
// makes `rate()` blind to that event, and dashboards show "no data" for "none".
for (const stage of ["created", "leased", "acked", "expired"]) deliveries.inc({ stage }, 0);
for (const outcome of ["acked", "deduplicated", "lease_lost"]) ackOutcomes.inc({ outcome }, 0);
for (const kind of ["unavailable", "conflict", "other"]) databaseErrors.inc({ kind }, 0);
for (const kind of ["deadlock", "lock_wait_timeout"]) databaseRetries.inc({ kind }, 0);

export const materialisationLag = new Gauge({
  name: "orbit_materialisation_lag_events",
  help: "Per subscription: committed stream head minus cursor_sequence (at the last refresh).",
  labelNames: ["subscription_id"] as const,
  registers: [subscriptionRegistry],
});

export const oldestPendingAge = new Gauge({
  name: "orbit_oldest_pending_age_seconds",
  help: "Per subscription: age of the oldest PENDING delivery (at the last refresh).",
  labelNames: ["subscription_id"] as const,
  registers: [subscriptionRegistry],
});

export const maxMaterialisationLag = new Gauge({
  name: "orbit_materialisation_lag_events_max",
  help: "The largest orbit_materialisation_lag_events of all subscriptions (at the last refresh).",
  registers: [registry],
});

export const maxOldestPendingAge = new Gauge({
  name: "orbit_oldest_pending_age_seconds_max",
  help: "Age of the oldest PENDING delivery of any subscription, 0 when none (at the last refresh).",
  registers: [registry],
});

export const metricsRefreshErrors = new Counter({
  name: "orbit_metrics_refresh_errors_total",
  help: "Refreshes of the database gauges that failed (the gauges keep their last values).",
  registers: [registry],
});

// Monotonic (performance.now): a step of the wall clock must not look like a refresh gap.
let refreshedAt: number | undefined;
let refreshingSince: number | undefined;

/** The refresh job started: the age counts from now until its first success. */
export function refreshStarted(): void {
  refreshingSince ??= performance.now();
}

/** The database gauges were just read. */
export function refreshed(): void {
  refreshedAt = performance.now();
}

/** Computed at scrape from memory: it grows while the refreshes fail. */
export const metricsRefreshAge = new Gauge({
  name: "orbit_metrics_refresh_age_seconds",
  help: "Seconds since the database gauges were last read (since the node started, before the first read).",
  registers: [registry],
  collect() {
    const since = refreshedAt ?? refreshingSince;
    this.set(since === undefined ? 0 : Math.max(0, performance.now() - since) / 1000);
  },
});

/** What the operator's metrics listener serves: every series. */
export const operatorRegistry = Registry.merge([registry, subscriptionRegistry]);

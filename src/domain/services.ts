// The node-local helpers a request may use besides the database: the result-log
// sequencer and the wake-ups of waiting claims and event connections. Nothing here
// decides delivery, leases or capacity; those live in the database (docs/tasks.md: several
// nodes are one cluster).
import type { Pool } from "../db/types.js";
import type { Logger } from "../log/index.js";
import { AttemptBatches } from "./attempt-batches.js";
import { CredentialLookups } from "./credential-lookups.js";
import { QueueSignals } from "./queue-signals.js";
import { QueuedTaskQuota } from "./queued-quota.js";
import { Sequencer } from "./sequencer.js";
import { SubscriptionSignals } from "./subscription-signals.js";

export interface NodeServices {
  readonly sequencer: Sequencer;
  readonly queueSignals: QueueSignals;
  /** Resumed subscriptions and retried deliveries: this node's event connections claim again. */
  readonly subscriptionSignals: SubscriptionSignals;
  readonly workerLeaseMs: number;
  /** Workers' calls that end attempts, committed in batches under load. */
  readonly attempts: AttemptBatches;
  /** HTTP requests' credential lookups, shared by the requests that wait together. */
  readonly credentials: CredentialLookups;
  /** The namespaces' limit on QUEUED tasks, when ORBIT_MAX_QUEUED_TASKS_PER_NAMESPACE is set. */
  readonly queuedQuota: QueuedTaskQuota | undefined;
}

/** `pool`: the node's main pool; `sequencerPool`: the sequencer's own connections (server.ts). */
export function createServices(
  pool: Pool,
  sequencerPool: Pool,
  log: Logger,
  o: { readonly workerLeaseMs: number; readonly maxQueuedTasksPerNamespace: number | undefined },
): NodeServices {
  const services: NodeServices = {
    sequencer: new Sequencer(sequencerPool, log),
    queueSignals: new QueueSignals(),
    subscriptionSignals: new SubscriptionSignals(),
    workerLeaseMs: o.workerLeaseMs,
    attempts: new AttemptBatches(pool, (namespaces, queues) => afterCommit(services, namespaces, queues)),
    credentials: new CredentialLookups(pool),
    queuedQuota:
      o.maxQueuedTasksPerNamespace === undefined ? undefined : new QueuedTaskQuota(pool, o.maxQueuedTasksPerNamespace),
  };
  return services;
}

/** After a commit: number new events and wake claims of queues that got work. */
export function afterCommit(services: NodeServices, namespaces: Iterable<string>, queues: Iterable<string>): void {
  for (const ns of namespaces) void services.sequencer.kick(ns);
  for (const q of queues) services.queueSignals.notify(q);
}

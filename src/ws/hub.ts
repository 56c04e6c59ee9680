// The event endpoint of a node: the upgrade guard, the live sessions, the claim pool,
// ACK batching, and the wake-ups that make a committed result reach a waiting consumer:
// at once when this node's sequencer numbered it, within HEAD_POLL_MS when another node
// did (one query for all namespaces with sessions on this node).
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { WebSocketServer, type WebSocket } from "ws";
import { MAX_FRAME_BYTES, MAX_UPGRADES_AUTHENTICATING } from "../config/limits.js";
import type { Pool } from "../db/types.js";
import { namespaceHeads } from "../domain/event-sessions.js";
import { authenticate, requireAction } from "../domain/identity.js";
import type { Sequencer } from "../domain/sequencer.js";
import type { SubscriptionSignals } from "../domain/subscription-signals.js";
import { describeError, type Logger } from "../log/index.js";
import { ERROR_CATALOGUE, OrbitError, unavailable, type ErrorCode } from "../wire/errors.js";
import { writeRawError } from "../edge/raw-response.js";
import { recordRequest } from "../edge/access-log.js";
import type { ClientAddress } from "../edge/client-address.js";
import { AckBatcher } from "./ack-batcher.js";
import { ClaimScheduler } from "./claim-scheduler.js";
import { runClaims } from "./claims.js";
import { CLOSE } from "./close-codes.js";
import { EventSession } from "./event-session.js";
import { checkOrigin, checkHandshake, SUBPROTOCOL } from "./guard.js";
import { requestIdFrom } from "../wire/ids.js";
import * as metrics from "../metrics.js";

/**
 * How often a node looks for results committed by other nodes: one indexed query for all
 * namespaces with sessions here, whatever the number of sessions. It bounds a cross-node
 * commit-to-deliver (half of it on average, plus a claim) at a cost per node, not per
 * connection.
 */
export const HEAD_POLL_MS = 200;

/** The one path a WebSocket upgrade is served on (openapi.yaml connectEvents); server.ts hands the hub only these. */
export const EVENTS_PATH = "/v1/events/connect";

/** An upgrade request carries its request id from the guard to ws's answers (101, refusals). */
type UpgradeRequest = IncomingMessage & { orbitRequestId?: string; orbitRecord?: (status: number) => void };

export interface HubDeps {
  readonly pool: Pool;
  readonly claimPool: Pool;
  /** ACK transactions only (AckBatcher). */
  readonly ackPool: Pool;
  readonly sequencer: Sequencer;
  /** Resumed subscriptions and retried deliveries (HTTP calls on this node). */
  readonly subscriptionSignals: SubscriptionSignals;
  readonly log: Logger;
  /** The access log's client address of an upgrade (ORBIT_TRUSTED_PROXIES). */
  readonly clientAddress: ClientAddress;
  readonly nodeId: string;
  readonly maxConnections: number;
  /** Event connections of one application on this node (ORBIT_MAX_CONNECTIONS_PER_APPLICATION). */
  readonly maxConnectionsPerApplication: number;
  /** An upgrade's credential lookup gets this long (the management deadline), then 503. */
  readonly requestTimeoutMs: number;
  readonly leaseDurationMs: number;
  readonly helloTimeoutMs: number;
  readonly idleTimeoutMs: number;
}

export class EventHub {
  private readonly wss = new WebSocketServer({
    noServer: true,
    perMessageDeflate: false,
    maxPayload: MAX_FRAME_BYTES,
    clientTracking: false,
    handleProtocols: (protocols) => (protocols.has(SUBPROTOCOL) ? SUBPROTOCOL : false),
  });
  private readonly connections = new Set<EventSession>();
  /** Session closes of connections that already left `connections`, still being written. */
  private readonly closingSessions = new Set<Promise<void>>();
  private readonly scheduler = new ClaimScheduler<EventSession>((batch) =>
    runClaims(batch, this.deps.claimPool, this.deps.leaseDurationMs),
  );
  private readonly acks: AckBatcher;
  private readonly heads = new Map<string, string>();
  private readonly poll: NodeJS.Timeout;
  private readonly unsubscribe: () => void;
  private readonly unsubscribeSubscriptions: () => void;
  /**
   * Event connections whose socket is still open, bound or not, closing ones included: a
   * connection we closed stays open until the client answers the close (ws waits for it),
   * and a client that never answers must not get past the per-node limit of event
   * connections (docs/protocol.md §5) by having us close its connections.
   */
  private readonly openSockets = new Set<WebSocket>();
  /** Open sockets by application id, for the per-application limit. */
  private readonly perApplication = new Map<string, number>();
  /** Upgrades whose credential lookup has not settled, timed-out ones included. */
  private authenticating = 0;
  private closing = false;
  /** A head poll is waiting for its answer. */
  private polling = false;

  constructor(private readonly deps: HubDeps) {
    this.acks = new AckBatcher(deps.ackPool);
    this.wss.on("headers", (headers, req) => {
      headers.push(`X-Request-ID: ${(req as UpgradeRequest).orbitRequestId ?? ""}`, "Cache-Control: no-store");
    });
    // ws refuses some handshakes itself, after the guard (a Sec-WebSocket-Protocol with a
    // duplicated, empty or non-token item), with a bare text/html 400. With a listener it
    // leaves the answer to us: the envelope and the request's id, as every other refusal.
    this.wss.on("wsClientError", (_e, socket, req) => {
      writeRawError(socket, "INVALID_ARGUMENT", {}, (req as UpgradeRequest).orbitRequestId);
      (req as UpgradeRequest).orbitRecord?.(ERROR_CATALOGUE.INVALID_ARGUMENT.status);
    });
    this.poll = setInterval(() => void this.pollHeads(), HEAD_POLL_MS);
    this.unsubscribe = deps.sequencer.onAdvance((ns) => this.wake(ns));
    this.unsubscribeSubscriptions = deps.subscriptionSignals.on((id) => {
      for (const c of this.connections) if (c.subscriptionId === id) c.wake();
    });
  }

  get size(): number {
    return this.connections.size;
  }

  /** The guard of docs/protocol.md §5, in the order openapi.yaml gives, then the 101. */
  async handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const started = process.hrtime.bigint();
    socket.on("error", () => socket.destroy());
    // The request id of every answer below, the 101 included: the caller's, as over HTTP.
    const offered = req.headers["x-request-id"];
    const requestId = requestIdFrom(typeof offered === "string" ? offered : undefined);
    // Logged and counted like any HTTP request (Koa never sees an upgrade). The address is
    // read now: a socket destroyed before the log line has none.
    const clientAddress = this.deps.clientAddress(req);
    let credentialId: string | undefined;
    const record = (status: number) =>
      recordRequest(this.deps.log, {
        requestId,
        method: req.method ?? "GET",
        route: "connectEvents",
        status,
        started,
        clientAddress,
        credentialId,
      });
    const refuse = (code: ErrorCode, headers: Record<string, string> = {}, message?: string) => {
      writeRawError(socket, code, headers, requestId, message);
      record(ERROR_CATALOGUE[code].status);
    };
    if (this.closing) return refuse("UNAVAILABLE", { "Retry-After": "1" });
    // Before any database work: a node that is full, or already looking up as many
    // credentials as it allows, refuses at once what it could not take anyway.
    if (this.openSockets.size >= this.deps.maxConnections) {
      return refuse("CAPACITY_EXCEEDED", { "Retry-After": "1" });
    }
    if (this.authenticating >= MAX_UPGRADES_AUTHENTICATING) {
      return refuse("UNAVAILABLE", { "Retry-After": "1" }, "too many event connections are being opened at once");
    }
    try {
      const authorization = req.headersDistinct["authorization"];
      const caller = await this.authenticateWithin(authorization?.length === 1 ? authorization[0] : undefined);
      credentialId = caller.credentialId;
      checkOrigin(req);
      requireAction(caller, "events:consume");
      checkHandshake(req);
      // Only open sockets count: an upgrade still being authenticated is no connection, so
      // a flood of unauthenticated upgrades cannot make valid ones 429. Nothing is awaited
      // from here to the socket's entry in openSockets (ws completes the upgrade
      // synchronously), so no two upgrades pass this check for the last free connection.
      if (this.openSockets.size >= this.deps.maxConnections) {
        return refuse("CAPACITY_EXCEEDED", { "Retry-After": "1" });
      }
      const application = caller.applicationId;
      if ((this.perApplication.get(application) ?? 0) >= this.deps.maxConnectionsPerApplication) {
        return refuse(
          "CAPACITY_EXCEEDED",
          { "Retry-After": "1" },
          "the application has its maximum of event connections on this node",
        );
      }
      if (this.closing) return refuse("UNAVAILABLE", { "Retry-After": "1" });
      (req as UpgradeRequest).orbitRequestId = requestId;
      (req as UpgradeRequest).orbitRecord = record;
      this.wss.handleUpgrade(req, socket, head, (ws) => {
        record(101);
        this.openSockets.add(ws);
        this.perApplication.set(application, (this.perApplication.get(application) ?? 0) + 1);
        ws.once("close", () => {
          this.openSockets.delete(ws);
          const left = (this.perApplication.get(application) ?? 1) - 1;
          if (left > 0) this.perApplication.set(application, left);
          else this.perApplication.delete(application);
        });
        const conn = new EventSession(ws, caller, authorization![0]!, {
          ...this.deps,
          scheduler: this.scheduler,
          acks: this.acks,
          // Lease recovery needs a claim now and then even without new results; once per
          // lease period (capped, and never more often than 10 times a second) keeps an idle
          // session's queries rare.
          recheckMs: Math.min(30_000, Math.max(100, this.deps.leaseDurationMs)),
          onBound: () => undefined,
          onAcked: (by, deliveryId) => {
            for (const c of this.connections)
              if (c !== by && c.subscriptionId === by.subscriptionId) c.ackedElsewhere(deliveryId);
          },
          onClosed: (c) => {
            this.connections.delete(c);
            // Shutdown waits for this close to be recorded too (the pool ends after it).
            const recorded = c.sessionClosed.finally(() => this.closingSessions.delete(recorded));
            this.closingSessions.add(recorded);
            metrics.eventConnections.set(this.connections.size);
          },
        });
        this.connections.add(conn);
        metrics.eventConnections.set(this.connections.size);
      });
    } catch (e) {
      // Its own message says why (a cross-origin Origin is not a missing action).
      if (e instanceof OrbitError) return refuse(e.code, e.headers as Record<string, string>, e.message);
      this.deps.log.log("warn", "upgrade failed", describeError(e));
      refuse("UNAVAILABLE", { "Retry-After": "1" });
    }
  }

  /**
   * The credential lookup of an upgrade, within the management deadline (503 after it).
   * A lookup that outlives its deadline still counts as authenticating until it settles,
   * so a database that stalls cannot make the node start more of them.
   */
  private async authenticateWithin(authorization: string | undefined) {
    this.authenticating++;
    const lookup = authenticate(this.deps.pool, authorization).finally(() => this.authenticating--);
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(unavailable()), this.deps.requestTimeoutMs);
    });
    try {
      return await Promise.race([lookup, deadline]);
    } finally {
      clearTimeout(timer);
      lookup.catch(() => undefined); // a late failure has no one left to tell
    }
  }

  /** Results were numbered in this namespace: sessions with room claim again. */
  private wake(namespaceId: string): void {
    for (const c of this.connections) if (c.namespaceId === namespaceId) c.requestClaim();
  }

  private async pollHeads(): Promise<void> {
    // One poll at a time: while the database stalls, polls that wait for the last one would
    // pile up on the main pool, and HTTP requests, pings and hellos would queue behind
    // them. A skipped tick costs nothing: the poll in progress reads the heads when the
    // database answers.
    if (this.polling) return;
    const namespaces = [...new Set([...this.connections].filter((c) => c.isBound).map((c) => c.namespaceId))];
    if (namespaces.length === 0) return;
    this.polling = true;
    try {
      for (const [ns, head] of await namespaceHeads(this.deps.pool, namespaces)) {
        if (this.heads.get(ns) !== head) {
          this.heads.set(ns, head);
          this.wake(ns);
        }
      }
    } catch (e) {
      this.deps.log.log("warn", "head poll failed", describeError(e));
    } finally {
      this.polling = false;
    }
  }

  /**
   * Shutdown: no new connections; claims in flight finish and send their frames, ACKs in
   * flight commit and answer; then every session closes with 1001. Durable state is
   * untouched: leases stay and are recovered by later claims.
   */
  async close(): Promise<void> {
    this.closing = true;
    clearInterval(this.poll);
    this.unsubscribe();
    this.unsubscribeSubscriptions();
    await this.scheduler.stop();
    await this.acks.drain();
    const all = [...this.connections];
    for (const c of all) c.close(CLOSE.goingAway, "server shutting down");
    await Promise.all([...all.map((c) => c.sessionClosed), ...this.closingSessions]);
    // A client that never answers the close frame must not hold the process for ws's
    // closing timeout: 2 s after 1001, what is left is cut — sockets of connections closed
    // before the signal (no hello, idle, an error) whose close is still unanswered included.
    const gone = [...this.openSockets].map((ws) => new Promise((r) => ws.once("close", r)));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(gone), new Promise((r) => (timer = setTimeout(r, 2000)))]);
    clearTimeout(timer);
    for (const ws of this.openSockets) ws.terminate();
    this.wss.close();
  }
}

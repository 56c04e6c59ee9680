// A running node: pool, migrations, the HTTP listener with the WebSocket upgrade path,
// and an ordered, idempotent, time-boxed shutdown.
import { readFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo, Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { Config } from "./config/index.js";
import { MAX_BODY_BYTES } from "./config/limits.js";
import { PACKAGE_JSON } from "./config/paths.js";
import { buildInfo } from "./metrics.js";
import { createPool, limitsOf, parseDatabaseUrl } from "./db/pool.js";
import { localPath } from "./db/local-socket.js";
import { ENGINE_SESSION } from "./domain/delivery-engine.js";
import { checkNotNewer, migrate } from "./db/migrate.js";
import { buildApp } from "./app.js";
import { endAnswered, writeRawError } from "./edge/raw-response.js";
import { clientAddressOf } from "./edge/client-address.js";
import { startMetricsListener, type MetricsListener } from "./edge/metrics-listener.js";
import { reparseWithoutUpgrade, trackAnswer, whenAnswered } from "./http/ignored-upgrade.js";
import { targetPath } from "./http/target.js";
import { describeError, type Logger } from "./log/index.js";
import type { Pool } from "./db/types.js";
import { createServices } from "./domain/services.js";
import { startBackground } from "./background.js";
import { EVENTS_PATH, EventHub } from "./ws/hub.js";
import { ACK_POOL_SIZE, CLAIM_POOL_GLOBAL, SEQUENCER_POOL_SIZE } from "./config/limits.js";
import { newId } from "./domain/identity.js";

export interface RunningServer {
  readonly url: string;
  readonly port: number;
  /** The metrics listener's port, when ORBIT_METRICS_PORT is set. */
  readonly metricsPort: number | undefined;
  readonly pool: Pool;
  /** Stops accepting, lets in-flight requests finish (at most graceMs), closes the pool. */
  close(graceMs?: number): Promise<void>;
}

export interface StartOptions {
  readonly migrate: boolean;
}

/** In-flight HTTP requests get this long from the signal; then their connections are cut. */
export const SHUTDOWN_GRACE_MS = 10_000;

/**
 * How long a statement may go unanswered before its database connection is taken for
 * dead and replaced (pool.ts watchAnswers). 60 s on the main and sequencer pools: above
 * MariaDB's and MySQL's default innodb_lock_wait_timeout (50 s), so a statement that waits
 * for a row lock always ends with the server's retryable lock-wait error first, and far
 * above any statement of theirs (bounded pages and batches).
 */
export const ANSWER_DEADLINE_MS = 60_000;
/**
 * 10 s on the claim and ACK pools: their statements are a claim's or an ACK batch's 2-3
 * round trips (milliseconds; bench/README.md), and a claim holds its application's only
 * claim slot (docs/protocol.md §5), so a dead connection must not keep it a minute. Under the 30 s
 * default lease: the consumer is told UNAVAILABLE (1013) and reconnects well before the
 * leases it holds run out.
 */
export const ENGINE_ANSWER_DEADLINE_MS = 10_000;

/** The node could not bind its listener (a port in use, a host it does not have). */
export class ListenError extends Error {
  constructor(host: string, port: number, cause: unknown) {
    const code = (cause as { code?: unknown })?.code;
    super(
      `cannot listen on ${host}:${port}: ${code === "EADDRINUSE" ? "the address is in use" : String(code ?? cause)}`,
    );
  }
}

/** How long an idle HTTP keep-alive connection stays open: above a balancer's 60 s. */
export const KEEP_ALIVE_MS = 65_000;

export async function startServer(config: Config, log: Logger, opts: StartOptions): Promise<RunningServer> {
  parseDatabaseUrl(config.databaseUrl);
  const { version } = JSON.parse(readFileSync(PACKAGE_JSON, "utf8")) as { version: string };
  buildInfo.set({ version, nodejs: process.version }, 1);
  if (opts.migrate) {
    const res = await migrate(config.databaseUrl);
    log.log("info", "migrated", {
      applied: res.applied.length,
      recovered: res.recovered.length,
      current: res.current,
    });
  } else {
    await checkNotNewer(config.databaseUrl);
  }
  const dbPath = await localPath(config.databaseUrl, config.databaseSocket);
  log.log(
    "info",
    "database",
    dbPath.socket
      ? { via: "unix socket", socket: dbPath.socket }
      : { via: "tcp", ...(dbPath.tcpBecause ? { because: dbPath.tcpBecause } : {}) },
  );
  const databaseUrl = dbPath.url;
  // Its statements serve requests with a deadline: lock waits and statements end by it.
  const pool = createPool(
    databaseUrl,
    config.dbPoolSize,
    undefined,
    ANSWER_DEADLINE_MS,
    limitsOf(config.requestTimeoutMs),
  );
  let closing = false;
  // The sequencer numbers what every request committed, and nothing is delivered before
  // it: on the main pool its transaction would queue behind the requests in flight, and
  // that wait would be most of a result's latency.
  const sequencerPool = createPool(databaseUrl, SEQUENCER_POOL_SIZE, undefined, ANSWER_DEADLINE_MS);
  const services = createServices(pool, sequencerPool, log, config);
  const clientAddress = clientAddressOf(config.trustedProxies);
  const app = buildApp({
    pool,
    services,
    log,
    requestTimeoutMs: config.requestTimeoutMs,
    clientAddress,
    metricsElsewhere: config.metricsPort !== undefined,
  });
  const koaHandler = app.callback();
  // requireHostHeader off: Node would answer a Host-less request with a bare 400
  // outside the envelope; Koa answers it like any other.
  // Answers not yet sent: those in flight when the node starts closing (a claim waiting
  // out wait_ms, a slow upload) also say Connection: close, so no client reuses a
  // connection to a node that is going away.
  const unsent = new Set<http.ServerResponse>();
  const handle = (req: http.IncomingMessage, res: http.ServerResponse) => {
    trackAnswer(req, res);
    if (closing) res.setHeader("Connection", "close");
    else {
      unsent.add(res);
      res.once("close", () => unsent.delete(res));
    }
    void koaHandler(req, res);
  };
  const server = http.createServer({ requireHostHeader: false }, handle);
  // An Expect other than 100-continue: Node answers a bare 417 outside the envelope, a
  // status no operation lists. The node ignores the expectation and answers the request.
  server.on("checkExpectation", handle);
  // A CONNECT: with no listener Node destroys the socket, answering nothing. Koa answers it
  // as any other method (an unknown path 404, a known one 405 with Allow), and the
  // connection closes after the answer (Node has already let go of the socket).
  server.on("connect", (req: http.IncomingMessage, socket: Duplex) => {
    socket.on("error", () => socket.destroy());
    const res = new http.ServerResponse(req);
    res.shouldKeepAlive = false;
    res.assignSocket(socket as Socket);
    res.on("finish", () => endAnswered(socket));
    handle(req, res);
  });
  // Node's own limits sit just above ours so that Koa answers first, in the envelope.
  server.requestTimeout = config.requestTimeoutMs + 2000;
  server.headersTimeout = 10_000;
  server.maxHeadersCount = 100;
  // A load balancer reuses its connections to the node and closes one idle for 60 s (the
  // usual default): the node must not close it first, or a request the balancer sends as
  // the node closes is lost (a 502). Idle connections close at shutdown all the same.
  server.keepAliveTimeout = KEEP_ALIVE_MS;
  server.on("clientError", (err, socket) => {
    log.log("warn", "client error", describeError(err));
    writeRawError(socket, "INVALID_ARGUMENT");
  });
  // Claims get a pool of their own, as large as the claim pool, so that slow claim SQL
  // never holds up ACKs, pings and hellos (docs/protocol.md §5). Only claims run there, so their
  // session settings are made once per connection (ENGINE_SESSION).
  const claimPool = createPool(databaseUrl, CLAIM_POOL_GLOBAL, ENGINE_SESSION, ENGINE_ANSWER_DEADLINE_MS);
  // ACKs get theirs too: behind 16 busy HTTP requests on the main pool an ACK's commit
  // would wait for a connection, its connection's capacity stay taken, and deliveries on
  // a node that also takes appends lag (bench orbit.latency, same node). Only ACK
  // transactions run there: ENGINE_SESSION as for claims.
  const ackPool = createPool(databaseUrl, ACK_POOL_SIZE, ENGINE_SESSION, ENGINE_ANSWER_DEADLINE_MS);
  const hub = new EventHub({
    pool,
    claimPool,
    ackPool,
    sequencer: services.sequencer,
    subscriptionSignals: services.subscriptionSignals,
    log,
    clientAddress,
    nodeId: newId(),
    maxConnections: config.maxConnections,
    maxConnectionsPerApplication: config.maxConnectionsPerApplication,
    requestTimeoutMs: config.requestTimeoutMs,
    leaseDurationMs: config.leaseDurationMs,
    helloTimeoutMs: config.helloTimeoutMs,
    idleTimeoutMs: config.idleTimeoutMs,
  });
  server.on("upgrade", (req, socket, head) => {
    // An absolute-form target naming this host is the path it names; one naming another
    // goes on to Koa, which answers it 400 (target.ts).
    const path = targetPath(req.url ?? "", req.headers.host);
    if (path !== undefined && path.split("?")[0] === EVENTS_PATH) {
      req.url = path;
      // Pipelined behind other requests, an upgrade waits for their answers: its 101 or
      // refusal comes after them, in order.
      return whenAnswered(socket, () => void hub.handleUpgrade(req, socket, head));
    }
    // Anywhere else the offer is ignored (ignored-upgrade.ts).
    reparseWithoutUpgrade(server, req, socket, head);
  });
  const closePools = () => Promise.all([claimPool.end(), ackPool.end(), sequencerPool.end(), pool.end()]);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(config.port, config.host, () => {
        server.off("error", reject);
        resolve();
      });
    });
    // An error after listening (a failed accept: out of file descriptors) is logged, not
    // thrown: without a listener it would end the process.
    server.on("error", (e) => log.log("warn", "listener error", describeError(e)));
  } catch (e) {
    // Nothing may keep the process alive (the hub's head poll, the pools): a node that
    // cannot listen exits at once, saying why, instead of running and serving nothing.
    await hub.close();
    await closePools();
    throw new ListenError(config.host, config.port, e);
  }
  const port = (server.address() as AddressInfo).port;
  let metrics: MetricsListener | undefined;
  if (config.metricsPort !== undefined) {
    try {
      metrics = await startMetricsListener(config.metricsHost, config.metricsPort, log);
    } catch (e) {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await hub.close();
      await closePools();
      throw new ListenError(config.metricsHost, config.metricsPort, e);
    }
  }
  const background = startBackground(pool, services, log, config);
  log.log("info", "listening", {
    host: config.host,
    port,
    max_body_bytes: MAX_BODY_BYTES,
    ...(metrics ? { metrics_host: config.metricsHost, metrics_port: metrics.port } : {}),
  });

  let closed: Promise<void> | undefined;
  return {
    url: `http://${config.host}:${port}`,
    port,
    metricsPort: metrics?.port,
    pool,
    close(graceMs = SHUTDOWN_GRACE_MS) {
      closed ??= (async () => {
        closing = true;
        for (const res of unsent) if (!res.headersSent) res.setHeader("Connection", "close");
        unsent.clear();
        // Stop accepting first, then close the event connections:
        // no new connection is taken while the event connections close (up to 2 s);
        // requests on open keep-alive connections are answered with Connection: close.
        const done = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        // Counted from the signal, not from the end of the event connections' close.
        const timer = setTimeout(() => server.closeAllConnections(), graceMs);
        // Long-polling claims answer 204 now rather than hold the shutdown up.
        services.queueSignals.close();
        // Event connections: claims and ACKs in flight finish, then 1001.
        await hub.close();
        server.closeIdleConnections();
        await done;
        clearTimeout(timer);
        await background.stop();
        // Last of the listeners: the shutdown can be watched on it until the pools go.
        await metrics?.close();
        await closePools();
        log.log("info", "stopped");
      })();
      return closed;
    },
  };
}

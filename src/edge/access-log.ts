// The access log line and the HTTP metrics of one request. The node's edge has two doors,
// Koa's request pipeline (http/) and the WebSocket upgrade (ws/): both record their
// answers here, so that an upgrade is logged and counted like any request.
import type { Logger } from "../log/index.js";
import * as metrics from "../metrics.js";

/**
 * Records one answered request: every request Koa answers, and every WebSocket upgrade
 * (refused, or answered 101), which Koa never sees.
 */
export function recordRequest(
  log: Logger,
  r: {
    requestId: string;
    method: string;
    route: string;
    status: number;
    started: bigint;
    /** The client as client-address.ts resolves it. */
    clientAddress: string | undefined;
    /** The authenticated credential, when the request got that far; never its token. */
    credentialId: string | undefined;
  },
): void {
  metrics.httpRequests.inc({ route: r.route, status: String(r.status) });
  metrics.httpDuration.observe({ route: r.route }, Number(process.hrtime.bigint() - r.started) / 1e9);
  log.log("info", "request", {
    request_id: r.requestId,
    method: r.method,
    route: r.route,
    status: r.status,
    duration_ms: Number((process.hrtime.bigint() - r.started) / 1000n) / 1000,
    client_address: r.clientAddress,
    credential_id: r.credentialId,
  });
}

// The operator's metrics listener (ORBIT_METRICS_PORT): plain HTTP serving GET /metrics
// only, every series included (metrics.ts operatorRegistry), on a port a firewall can keep
// apart from the one tenants reach. Like the main port's /metrics it answers from memory.
// Scrapes are neither logged nor counted in orbit_http_*: they are the operator's
// machinery, not traffic.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { describeError, type Logger } from "../log/index.js";
import { operatorRegistry } from "../metrics.js";

export const METRICS_PATH = "/metrics";

export interface MetricsListener {
  readonly port: number;
  close(): Promise<void>;
}

export async function startMetricsListener(host: string, port: number, log: Logger): Promise<MetricsListener> {
  const server = http.createServer((req, res) => {
    res.setHeader("Cache-Control", "no-store");
    const path = (req.url ?? "").split("?")[0];
    if (path !== METRICS_PATH) return void res.writeHead(404, { "Content-Type": "text/plain" }).end("not found\n");
    if (req.method !== "GET" && req.method !== "HEAD")
      return void res.writeHead(405, { Allow: "GET, HEAD", "Content-Type": "text/plain" }).end("method not allowed\n");
    operatorRegistry.metrics().then(
      (text) =>
        res
          .writeHead(200, { "Content-Type": operatorRegistry.contentType })
          .end(req.method === "GET" ? text : undefined),
      () => res.writeHead(500, { "Content-Type": "text/plain" }).end("internal error\n"),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  // An error after listening (a failed accept: out of file descriptors) is logged, not
  // thrown: without a listener it would end the process.
  server.on("error", (e) => log.log("warn", "metrics listener error", describeError(e)));
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        // A scraper's keep-alive connection would hold the close up until it times out.
        server.closeAllConnections();
      }),
  };
}

// A fake peer on a free loopback port — a plain HTTP server with a ws server on it — for
// the SDK and example tests that need a node misbehaving in one exact way (never answering
// a hello, a close, an ACK). Real nodes are started with orbit.ts; this is only the peer.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { WebSocketServer } from "ws";

export interface FakeNode {
  readonly url: string;
  /** Attach "connection" listeners here; with none it takes upgrades and answers nothing. */
  readonly wss: WebSocketServer;
  /** Cuts every connection and stops listening. */
  close(): Promise<void>;
}

export async function fakeNode(onRequest?: http.RequestListener): Promise<FakeNode> {
  const server = http.createServer(onRequest);
  const wss = new WebSocketServer({ server });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    wss,
    async close() {
      for (const ws of wss.clients) ws.terminate();
      wss.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

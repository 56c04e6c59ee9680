// A TCP proxy on loopback between a client and a server that a test can make lose
// answers: the request reaches the server, the response never reaches the client.
import net from "node:net";

export interface Proxy {
  readonly port: number;
  readonly url: string;
  /** The next n responses are dropped (the connection is cut as the answer starts). */
  dropResponses(n: number): void;
  readonly dropped: number;
  close(): Promise<void>;
}

export async function startProxy(targetPort: number): Promise<Proxy> {
  let toDrop = 0;
  let dropped = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, "127.0.0.1");
    sockets.add(client).add(upstream);
    client.on("data", (d) => upstream.write(d));
    upstream.on("data", (d) => {
      if (toDrop > 0) {
        toDrop--;
        dropped++;
        client.destroy();
        upstream.destroy();
        return;
      }
      client.write(d);
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on("close", end).on("error", end);
    upstream.on("close", end).on("error", end);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    dropResponses(n) {
      toDrop = n;
    },
    get dropped() {
      return dropped;
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

// A TCP proxy on loopback between a client and a server that a test can make lose
// answers (the request reaches the server, the response never reaches the client), or
// cut altogether (every connection dropped, new ones refused) and restore.
import net from "node:net";

export interface Proxy {
  readonly port: number;
  readonly url: string;
  /** The next n responses are dropped (the connection is cut as the answer starts). */
  dropResponses(n: number): void;
  readonly dropped: number;
  /** Data chunks the clients have sent so far: about one per statement, for counting a single client's queries. */
  readonly chunksFromClients: number;
  /** Holds back the server's answers (in order, per connection) until release(): the statements run, their results wait. */
  hold(): void;
  release(): void;
  /** Drops every connection and refuses new ones until restore(). */
  cut(): void;
  restore(): void;
  close(): Promise<void>;
}

export async function startProxy(targetPort: number): Promise<Proxy> {
  // upstream errors (a cut) are expected; they must not crash the test process
  let toDrop = 0;
  let dropped = 0;
  let chunks = 0;
  let severed = false;
  let held: (() => void)[] | undefined;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    if (severed) {
      client.destroy();
      return;
    }
    const upstream = net.connect(targetPort, "127.0.0.1");
    sockets.add(client).add(upstream);
    client.on("data", (d) => {
      chunks++;
      upstream.write(d);
    });
    upstream.on("data", (d) => {
      if (held) {
        held.push(() => client.write(d));
        return;
      }
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
    get chunksFromClients() {
      return chunks;
    },
    hold() {
      held ??= [];
    },
    release() {
      const answers = held ?? [];
      held = undefined;
      for (const write of answers) write();
    },
    cut() {
      severed = true;
      for (const s of sockets) s.destroy();
    },
    restore() {
      severed = false;
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

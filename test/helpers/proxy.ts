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
  /**
   * The first connection that sends a statement containing `text` from now on gets no
   * more answers until release(); the others carry on. A database connection that went
   * silent without closing (a failover, a lost NAT entry) while the database still serves.
   */
  stallWhen(text: string): void;
  /** Whether a stallWhen connection has been stalled. */
  readonly stalled: boolean;
  /**
   * The first connection that sends a statement containing `text` from now on is dropped
   * before that statement reaches the server; the others carry on. Resolves once it was.
   */
  cutWhen(text: string): Promise<void>;
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
  let stallText: string | undefined;
  let stalledOne = false;
  const stalledSockets = new Set<net.Socket>();
  const stalledAnswers: (() => void)[] = [];
  let cutText: { text: string; done: () => void } | undefined;
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
      if (cutText !== undefined && d.includes(cutText.text)) {
        const { done } = cutText;
        cutText = undefined;
        client.destroy();
        upstream.destroy();
        done();
        return;
      }
      if (stallText !== undefined && d.includes(stallText)) {
        stallText = undefined;
        stalledSockets.add(client);
        stalledOne = true;
      }
      upstream.write(d);
    });
    upstream.on("data", (d) => {
      if (stalledSockets.has(client)) {
        stalledAnswers.push(() => client.write(d));
        return;
      }
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
      stalledSockets.delete(client);
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
      const answers = [...stalledAnswers.splice(0), ...(held ?? [])];
      held = undefined;
      stallText = undefined;
      stalledSockets.clear();
      for (const write of answers) write();
    },
    stallWhen(text) {
      stallText = text;
      stalledOne = false;
    },
    get stalled() {
      return stalledOne;
    },
    cutWhen(text) {
      return new Promise((done) => (cutText = { text, done }));
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

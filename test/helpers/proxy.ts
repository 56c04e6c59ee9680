// A TCP proxy on loopback between a client and a server that a test can make lose
// answers (the request reaches the server, the response never reaches the client), or
// cut altogether (every connection dropped, new ones refused) and restore. Through it a
// real node can also misbehave as a WebSocket peer: take the upgrade and go silent, greet
// and then read nothing, or never get one client message.
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
  /** Lets through everything held: by hold(), stallWhen() and holdClientWhen(). */
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
   * Drops the stalled connections with the answers they were held back: what the server
   * did stays done, and the client learns nothing of it (a reply lost after COMMIT).
   */
  cutStalled(): void;
  /**
   * The connection that sends the `nth` (from 1) message containing `text` from now on is
   * dropped before that message reaches the server; the others carry on. Resolves once it
   * was. A message is a data chunk, or on a WebSocket connection one frame, unmasked.
   */
  cutWhen(text: string, nth?: number): Promise<void>;
  /**
   * The `nth` client message containing `text` from now on, and everything that client
   * sends after it, waits at the proxy until release(): the server gets it late, in order.
   */
  holdClientWhen(text: string, nth?: number): void;
  /**
   * The `nth` client message containing `text` from now on, and everything that client
   * sends after it, never reaches the server; the connection stays open both ways.
   */
  muteClientWhen(text: string, nth?: number): void;
  /**
   * Every WebSocket connection upgraded from now on gets the server's 101 Switching
   * Protocols and nothing after it: a node that takes the upgrade and never answers (a
   * wedged process, a path that went dead right after the handshake). The server still
   * gets everything the client sends.
   */
  muteServerAfterUpgrade(): void;
  /** Server data chunks muteServerAfterUpgrade kept from clients so far (the first on a connection answers its hello). */
  readonly mutedFromServer: number;
  /**
   * Every WebSocket connection upgraded from now on, once the server's first message (the
   * welcome) has passed, carries nothing more from the client to the server: a node that
   * greets and then reads nothing, so that it never answers a close frame.
   */
  muteClientAfterGreeting(): void;
  /**
   * Every WebSocket connection upgraded from now on is dropped once the server's first
   * message (the welcome) has passed: a node that greets and closes at once, over and
   * over (its database failing right after the hello).
   */
  cutAfterGreeting(): void;
  /** WebSocket connections the proxy has seen upgraded (101) so far. */
  readonly upgrades: number;
  /** Drops every connection and refuses new ones until restore(). */
  cut(): void;
  restore(): void;
  close(): Promise<void>;
}

type Rule = {
  readonly text: string;
  readonly nth: number;
  seen: number;
  readonly action: "cut" | "hold" | "mute" | "stall";
  readonly done?: () => void;
};

/** What passes between a client and its upstream connection. */
interface Link {
  readonly client: net.Socket;
  readonly upstream: net.Socket;
  /** The server answered 101 Switching Protocols: both ways carry WebSocket frames since. */
  upgraded: boolean;
  /** Client bytes of a frame not complete yet (WebSocket only). */
  partial: Buffer;
  /** Client messages waiting for release() (holdClientWhen). */
  heldFromClient: Buffer[] | undefined;
  clientMuted: boolean;
  serverMuted: boolean;
  muteClientOnGreeting: boolean;
  cutOnGreeting: boolean;
}

export async function startProxy(targetPort: number): Promise<Proxy> {
  // upstream errors (a cut) are expected; they must not crash the test process
  let toDrop = 0;
  let dropped = 0;
  let chunks = 0;
  let severed = false;
  let held: (() => void)[] | undefined;
  let stalledOne = false;
  let mutingServer = false;
  let mutingClient = false;
  let cuttingOnGreeting = false;
  let upgrades = 0;
  let mutedFromServer = 0;
  const stalledSockets = new Set<net.Socket>();
  const enders = new Map<net.Socket, () => void>();
  const stalledAnswers: (() => void)[] = [];
  let rules: Rule[] = [];
  const links = new Set<Link>();
  const sockets = new Set<net.Socket>();

  /** The rule this message sets off, if any; every armed rule counts the messages containing its text. */
  const fire = (message: Buffer): Rule | undefined => {
    let fired: Rule | undefined;
    for (const r of rules) if (message.includes(r.text) && ++r.seen === r.nth) fired ??= r;
    if (fired) rules = rules.filter((r) => r !== fired);
    return fired;
  };

  const server = net.createServer((client) => {
    if (severed) {
      client.destroy();
      return;
    }
    const upstream = net.connect(targetPort, "127.0.0.1");
    sockets.add(client).add(upstream);
    const link: Link = {
      client,
      upstream,
      upgraded: false,
      partial: Buffer.alloc(0),
      heldFromClient: undefined,
      clientMuted: false,
      serverMuted: false,
      muteClientOnGreeting: false,
      cutOnGreeting: false,
    };
    links.add(link);

    const fromClient = (raw: Buffer, text: Buffer): boolean => {
      if (link.clientMuted) return true;
      if (link.heldFromClient) {
        link.heldFromClient.push(raw);
        return true;
      }
      const rule = fire(text);
      switch (rule?.action) {
        case "cut":
          client.destroy();
          upstream.destroy();
          rule.done!();
          return false;
        case "hold":
          link.heldFromClient = [raw];
          return true;
        case "mute":
          link.clientMuted = true;
          return true;
        case "stall":
          stalledSockets.add(client);
          stalledOne = true;
          break;
      }
      upstream.write(raw);
      return true;
    };
    client.on("data", (d) => {
      chunks++;
      if (!link.upgraded) return void fromClient(d, d);
      // Client frames are masked (RFC 6455 §5.3): rules match their payload, unmasked.
      const { frames, rest } = takeFrames(Buffer.concat([link.partial, d]));
      link.partial = rest;
      for (const f of frames) if (!fromClient(f.raw, f.payload)) return;
    });

    const toClient = (d: Buffer) => {
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
    };
    upstream.on("data", (d) => {
      if (!link.upgraded && d.subarray(0, 12).toString("latin1") === "HTTP/1.1 101") {
        // ws writes the 101 in one piece; what follows its blank line is already frames.
        link.upgraded = true;
        link.serverMuted = mutingServer;
        link.muteClientOnGreeting = mutingClient;
        link.cutOnGreeting = cuttingOnGreeting;
        upgrades++;
        const blank = d.indexOf("\r\n\r\n");
        const end = blank < 0 ? d.length : blank + 4;
        toClient(d.subarray(0, end));
        d = d.subarray(end);
        if (d.length === 0) return;
      }
      if (link.serverMuted) {
        mutedFromServer++;
        return;
      }
      if (link.muteClientOnGreeting) link.clientMuted = true;
      toClient(d);
      if (link.cutOnGreeting) {
        client.end(); // what was written (the welcome) goes out first, then the FIN
        upstream.destroy();
      }
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
      stalledSockets.delete(client);
      enders.delete(client);
      links.delete(link);
    };
    enders.set(client, end);
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
      rules = rules.filter((r) => r.action !== "stall" && r.action !== "hold");
      stalledSockets.clear();
      for (const write of answers) write();
      for (const link of links) {
        const waiting = link.heldFromClient ?? [];
        link.heldFromClient = undefined;
        for (const raw of waiting) link.upstream.write(raw);
      }
    },
    stallWhen(text) {
      rules = rules.filter((r) => r.action !== "stall");
      rules.push({ text, nth: 1, seen: 0, action: "stall" });
      stalledOne = false;
    },
    get stalled() {
      return stalledOne;
    },
    cutStalled() {
      stalledAnswers.splice(0);
      for (const client of [...stalledSockets]) enders.get(client)?.();
    },
    cutWhen(text, nth = 1) {
      return new Promise((done) => rules.push({ text, nth, seen: 0, action: "cut", done }));
    },
    holdClientWhen(text, nth = 1) {
      rules.push({ text, nth, seen: 0, action: "hold" });
    },
    muteClientWhen(text, nth = 1) {
      rules.push({ text, nth, seen: 0, action: "mute" });
    },
    muteServerAfterUpgrade() {
      mutingServer = true;
    },
    get mutedFromServer() {
      return mutedFromServer;
    },
    muteClientAfterGreeting() {
      mutingClient = true;
    },
    cutAfterGreeting() {
      cuttingOnGreeting = true;
    },
    get upgrades() {
      return upgrades;
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

/** The complete WebSocket frames at the start of `buf` (each as sent, and its payload unmasked) and the bytes after them. */
function takeFrames(buf: Buffer): { frames: { raw: Buffer; payload: Buffer }[]; rest: Buffer } {
  const frames: { raw: Buffer; payload: Buffer }[] = [];
  let at = 0;
  for (;;) {
    if (buf.length - at < 2) break;
    const masked = (buf[at + 1]! & 0x80) !== 0;
    let length = buf[at + 1]! & 0x7f;
    let head = 2;
    if (length === 126) {
      if (buf.length - at < 4) break;
      length = buf.readUInt16BE(at + 2);
      head = 4;
    } else if (length === 127) {
      if (buf.length - at < 10) break;
      length = Number(buf.readBigUInt64BE(at + 2));
      head = 10;
    }
    const key = masked ? buf.subarray(at + head, at + head + 4) : undefined;
    const start = at + head + (masked ? 4 : 0);
    if (buf.length < start + length) break;
    const payload = Buffer.from(buf.subarray(start, start + length));
    if (key) for (let i = 0; i < payload.length; i++) payload[i]! ^= key[i % 4]!;
    frames.push({ raw: buf.subarray(at, start + length), payload });
    at = start + length;
  }
  return { frames, rest: buf.subarray(at) };
}

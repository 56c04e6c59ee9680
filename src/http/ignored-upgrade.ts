// An Upgrade offered anywhere but the event endpoint (curl --http2 offers h2c on every
// request) is ignored (RFC 9110 §7.8): the request is answered as if it had none. Node
// hands every request with an Upgrade to the server's "upgrade" listener with the HTTP
// parser gone, so the request goes back to a fresh parser, without the offer. Requests
// pipelined behind it are answered in order because the fresh parser starts only once
// every answer of the one before it has ended (whenAnswered).
import type http from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";

/** Answers started on each socket and not ended yet, and what waits for them to end. */
const unanswered = new WeakMap<Duplex, { count: number; waiting: (() => void)[] }>();

/** Counts res among its socket's unended answers until it closes (finished or aborted). */
export function trackAnswer(req: http.IncomingMessage, res: http.ServerResponse): void {
  const socket = req.socket;
  let entry = unanswered.get(socket);
  if (!entry) unanswered.set(socket, (entry = { count: 0, waiting: [] }));
  entry.count++;
  res.once("close", () => {
    entry.count--;
    if (entry.count === 0) entry.waiting.splice(0).forEach((run) => run());
  });
}

/**
 * Runs next once every answer started on the socket has ended, unless the socket is gone
 * by then. An Upgrade request pipelined behind others is handed over while their answers
 * may still be in progress; a parser attached then would queue its answer on state of its
 * own that the earlier answers never drain, and the answers after the first Upgrade
 * request of a pipeline would never be written. Node reads nothing from the socket
 * meanwhile (its data listener is gone).
 */
export function whenAnswered(socket: Duplex, next: () => void): void {
  const entry = unanswered.get(socket);
  if (!entry || entry.count === 0) return next();
  // Node took its error listener off with the parser: an error while waiting (a reset)
  // would otherwise be unhandled.
  const onError = (): void => void socket.destroy();
  socket.on("error", onError);
  entry.waiting.push(() => {
    socket.off("error", onError);
    if (!socket.destroyed) next();
  });
}

/** Gives the request back to Node's HTTP parser without its Upgrade offer, its body after it. */
export function reparseWithoutUpgrade(
  server: http.Server,
  req: http.IncomingMessage,
  socket: Duplex,
  head: Buffer,
): void {
  whenAnswered(socket, () => {
    // The earlier answer's end armed the keep-alive timeout (5 s) for the parser that
    // is gone; the fresh one would never clear it, and it would cut a request in progress.
    (socket as Socket).setTimeout(0);
    socket.unshift(Buffer.concat([withoutUpgrade(req), head]));
    server.emit("connection", socket);
  });
}

/** The request line and header block of req, without Upgrade and its Connection token. */
function withoutUpgrade(req: http.IncomingMessage): Buffer {
  const lines = [`${req.method} ${req.url} HTTP/${req.httpVersion}`];
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i]!;
    let value = req.rawHeaders[i + 1]!;
    if (/^upgrade$/i.test(name)) continue;
    if (/^connection$/i.test(name)) {
      value = value
        .split(",")
        .map((t) => t.trim())
        .filter((t) => t !== "" && t.toLowerCase() !== "upgrade")
        .join(", ");
      if (value === "") continue;
    }
    lines.push(`${name}: ${value}`);
  }
  // Node read the header bytes as latin1: written back the same way, they are the bytes sent.
  return Buffer.from(`${lines.join("\r\n")}\r\n\r\n`, "latin1");
}

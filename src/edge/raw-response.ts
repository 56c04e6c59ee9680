// Error responses written straight to a socket, for the paths Koa never sees: rejected
// WebSocket upgrades (ws/hub.ts) and requests Node could not parse (server.ts). Same
// envelope, same headers as an answer of Koa's.
import { newHexId } from "../wire/ids.js";
import { STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import { ERROR_CATALOGUE, OrbitError, type ErrorCode } from "../wire/errors.js";
import { failure } from "../wire/envelope.js";

/** `message`: an OrbitError's own client-facing message; the catalogue's by default. */
export function rawErrorResponse(
  code: ErrorCode,
  extraHeaders: Record<string, string> = {},
  requestId?: string,
  message?: string,
): string {
  const id = requestId ?? newHexId();
  const status = ERROR_CATALOGUE[code].status;
  const body = JSON.stringify(failure(id, code, message ?? new OrbitError(code).message));
  const headers: Record<string, string> = {
    "Content-Type": "application/json; charset=utf-8",
    "Content-Length": String(Buffer.byteLength(body)),
    "X-Request-ID": id,
    "Cache-Control": "no-store",
    ...extraHeaders,
    // The socket ends after this answer, whatever else Connection names (426: Upgrade).
    Connection: extraHeaders.Connection ? `${extraHeaders.Connection}, close` : "close",
  };
  const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}`);
  return `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ""}\r\n${lines.join("\r\n")}\r\n\r\n${body}`;
}

export function writeRawError(
  socket: Duplex,
  code: ErrorCode,
  extraHeaders: Record<string, string> = {},
  requestId?: string,
  message?: string,
): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  endAnswered(socket, rawErrorResponse(code, extraHeaders, requestId, message));
}

/** How long a socket the node answered and ended waits for the client to close its side. */
export const LINGER_MS = 2000;

/**
 * Ends a socket the node answered outside Node's HTTP server (an upgrade refused, a request
 * Node could not parse, a CONNECT), where none of the server's timeouts applies any more,
 * and destroys it if the client has not closed its side LINGER_MS later: ended only, a
 * client that keeps its half open would hold the socket, and a file descriptor, for ever.
 */
export function endAnswered(socket: Duplex, data?: string): void {
  socket.end(data);
  const timer = setTimeout(() => socket.destroy(), LINGER_MS);
  timer.unref();
  socket.once("close", () => clearTimeout(timer));
}

// Checks of the upgrade request that need no database (docs/protocol.md §5, openapi.yaml
// connectEvents): same-origin only, no query string, a well-formed WebSocket handshake
// offering orbit.events.v1. Each failure is an OrbitError with the contract's code.
import type { IncomingMessage } from "node:http";
import { OrbitError, invalidArgument, protocolRequired } from "../wire/errors.js";

export const SUBPROTOCOL = "orbit.events.v1";

/** No Origin (a non-browser client) is fine; a cross-origin one or "null" is refused. */
export function checkOrigin(req: IncomingMessage): void {
  const origin = req.headers.origin;
  if (origin === undefined) return;
  let host: string;
  try {
    host = new URL(origin).host;
  } catch {
    throw new OrbitError("PERMISSION_DENIED", "cross-origin event connections are refused");
  }
  if (origin === "null" || host === "" || host !== req.headers.host) {
    throw new OrbitError("PERMISSION_DENIED", "cross-origin event connections are refused");
  }
}

export function offersSubprotocol(header: string | undefined): boolean {
  return (header ?? "").split(",").some((p) => p.trim() === SUBPROTOCOL);
}

export function checkHandshake(req: IncomingMessage): void {
  if ((req.url ?? "").includes("?")) throw invalidArgument("the event endpoint takes no query parameters");
  if (!offersSubprotocol(req.headers["sec-websocket-protocol"])) throw protocolRequired();
  const upgrade = (req.headers.upgrade ?? "").toLowerCase();
  const key = req.headers["sec-websocket-key"] ?? "";
  if (
    req.method !== "GET" ||
    upgrade !== "websocket" ||
    req.headers["sec-websocket-version"] !== "13" ||
    !/^[+/0-9A-Za-z]{21}[AQgw]==$/.test(key)
  ) {
    throw protocolRequired("a WebSocket 13 upgrade is required");
  }
}

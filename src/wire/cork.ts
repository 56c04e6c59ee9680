// Frames sent in one event-loop turn leave in one write: the socket is corked at the
// first send and uncorked in process.nextTick, after the turn's microtasks (ACKs resolved
// together, deliveries parsed from one read). One syscall — and one wake-up of the peer —
// instead of one per frame. ws has no public cork; its maintainers point to the socket's
// own cork()/uncork() (websockets/ws#1999), which ws's Sender already nests per frame
// (Writable's cork is a counter). Used by both ends of an event connection: the node's
// event sessions and the SDK's connection.
import type WebSocket from "ws";
import type { Socket } from "node:net";

const corked = new WeakSet<Socket>();

export function corkForTurn(ws: WebSocket): void {
  const socket = (ws as unknown as { _socket?: Socket })._socket;
  if (!socket || corked.has(socket) || socket.destroyed) return;
  corked.add(socket);
  socket.cork();
  process.nextTick(() => {
    corked.delete(socket);
    socket.uncork();
  });
}

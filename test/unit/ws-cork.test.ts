import { strict as assert } from "node:assert";
import type { AddressInfo, Socket } from "node:net";
import WebSocket, { WebSocketServer } from "ws";
import { corkForTurn } from "../../src/wire/cork.js";

// Frames sent in one turn leave in one write: held in the socket until the turn ends, then
// whole and in order, and every send's callback still runs (the server's write queue
// counts on it).
describe("corkForTurn", () => {
  let wss: WebSocketServer;
  let client: WebSocket;
  let server: WebSocket;

  beforeEach(async () => {
    wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });
    await new Promise<void>((resolve) => wss.once("listening", resolve));
    const accepted = new Promise<WebSocket>((resolve) => wss.once("connection", resolve));
    client = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`);
    await new Promise<void>((resolve, reject) => client.once("open", resolve).once("error", reject));
    server = await accepted;
  });

  afterEach(async () => {
    client.terminate();
    await new Promise<void>((resolve) => wss.close(() => resolve()));
  });

  /** Sends `n` frames from the server in one turn; what the client got, and the server socket's state during the turn. */
  async function sendTurn(
    n: number,
  ): Promise<{ messages: number[]; callbacks: number; corkedInTurn: number; heldInTurn: number; corkedAfter: number }> {
    const socket = (server as unknown as { _socket: Socket })._socket;
    const messages: number[] = [];
    const all = new Promise<void>((resolve) => {
      client.on("message", (data) => {
        messages.push((JSON.parse(String(data)) as { i: number }).i);
        if (messages.length === n) resolve();
      });
    });
    let callbacks = 0;
    const written = new Promise<void>((resolve) => {
      for (let i = 0; i < n; i++) {
        corkForTurn(server);
        server.send(JSON.stringify({ i, pad: "x".repeat(500) }), (err) => {
          assert.equal(err ?? undefined, undefined);
          if (++callbacks === n) resolve();
        });
      }
    });
    // Still in the same turn: everything is held in the socket for one write.
    const corkedInTurn = socket.writableCorked;
    const heldInTurn = socket.writableLength;
    await Promise.all([all, written]);
    client.removeAllListeners("message");
    return { messages, callbacks, corkedInTurn, heldInTurn, corkedAfter: socket.writableCorked };
  }

  it("holds a turn's frames for one write, then sends them whole, in order, each with its callback", async () => {
    const seen = await sendTurn(8);
    assert.ok(seen.corkedInTurn > 0);
    assert.ok(seen.heldInTurn >= 8 * 500, `held ${seen.heldInTurn} bytes`);
    assert.deepEqual(seen.messages, [0, 1, 2, 3, 4, 5, 6, 7]);
    assert.equal(seen.callbacks, 8);
    assert.equal(seen.corkedAfter, 0);
    // The next turn is corked afresh: the socket was uncorked, not left corked.
    const again = await sendTurn(3);
    assert.ok(again.corkedInTurn > 0);
    assert.deepEqual(again.messages, [0, 1, 2]);
    assert.equal(again.corkedAfter, 0);
  });

  it("leaves a closed connection alone", async () => {
    server.terminate();
    await new Promise<void>((resolve) => client.once("close", () => resolve()));
    assert.doesNotThrow(() => corkForTurn(server));
  });
});

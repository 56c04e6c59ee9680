// Frames on the wire for the SDK's event connection: the upgrade's outcome, and JSON frames
// checked against the contract's generated validators in both directions.
import type WebSocket from "ws";
import { corkForTurn } from "../wire/cork.js";
import * as frameValidators from "../../generated/ws/validators.js";
import type { ClientFrame, ServerFrame } from "../../generated/ws/frames.js";
import { OrbitEventError } from "./errors.js";
import { parseRetryAfter } from "./retry-after.js";
import type { ErrorCode } from "./types.js";

type Validate = ((d: unknown) => boolean) & { errors?: unknown };
const validators = frameValidators as unknown as Record<string, Validate>;
const validClient = validators.clientFrame!;
const validServer = validators.serverFrame!;

/** Resolves when the upgrade is answered 101; rejects with the refusal's code otherwise. */
export function opened(ws: WebSocket): Promise<void> {
  return new Promise((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("unexpected-response", (_req, res) => {
      let text = "";
      res.on("data", (d: Buffer) => (text += d.toString()));
      res.on("end", () => {
        let code: ErrorCode | "PROTOCOL_ERROR" = "PROTOCOL_ERROR";
        let message = `upgrade refused with ${res.statusCode}`;
        try {
          const env = JSON.parse(text) as { error?: { code: ErrorCode; message: string } };
          if (env.error) ({ code, message } = env.error);
        } catch {
          /* not an envelope */
        }
        reject(new OrbitEventError(code, message, res.statusCode, parseRetryAfter(res.headers["retry-after"])));
      });
    });
    ws.once("error", (e) => reject(new OrbitEventError("CONNECTION_CLOSED", e.message)));
  });
}

export function send(ws: WebSocket, frame: ClientFrame): void {
  // Validate what we send: a frame the contract does not allow is a bug here, not there.
  if (!validClient(frame))
    throw new OrbitEventError("PROTOCOL_ERROR", `refusing to send an invalid ${frame.type} frame`);
  corkForTurn(ws);
  ws.send(JSON.stringify(frame));
}

/** The frame, when it is a text frame the contract allows from a server. */
export function parseServer(data: Buffer, isBinary: boolean): ServerFrame | undefined {
  if (isBinary) return undefined;
  try {
    const f = JSON.parse(data.toString("utf8")) as unknown;
    return validServer(f) ? (f as ServerFrame) : undefined;
  } catch {
    return undefined;
  }
}

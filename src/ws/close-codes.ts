// The WebSocket close codes an event session ends with (docs/protocol.md §7).
import type { ErrorCode } from "../wire/errors.js";

export const CLOSE = {
  normal: 1000,
  goingAway: 1001,
  policy: 1008,
  tooBig: 1009,
  internal: 1011,
  tryAgain: 1013,
} as const;

/** The close that follows an error frame of this code. */
export function closeCodeFor(code: ErrorCode): number {
  if (code === "UNAVAILABLE") return CLOSE.tryAgain;
  if (code === "INTERNAL") return CLOSE.internal;
  return CLOSE.policy;
}

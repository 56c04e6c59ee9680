import type { ErrorCode } from "./types.js";

/**
 * An error answer of the API: the protocol's code, the HTTP status, the request id and, on
 * 429 and 503, the answer's Retry-After in milliseconds.
 */
export class OrbitApiError extends Error {
  override readonly name = "OrbitApiError";
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly status: number,
    readonly requestId: string | undefined,
    readonly retryAfterMs?: number,
  ) {
    super(`${code}: ${message}`);
  }
}

/** The request never got an answer (after the retries): the outcome is unknown. */
export class OrbitNetworkError extends Error {
  override readonly name = "OrbitNetworkError";
  constructor(
    message: string,
    override readonly cause?: unknown,
  ) {
    super(message);
  }
}

/** An error frame of the protocol, or a refused upgrade, with the protocol's code. */
export class OrbitEventError extends Error {
  override readonly name = "OrbitEventError";
  constructor(
    readonly code: ErrorCode | "CONNECTION_CLOSED" | "PROTOCOL_ERROR",
    message: string,
    /** The HTTP status of a refused upgrade. */
    readonly status?: number,
    /** A refused upgrade's Retry-After (429 CAPACITY_EXCEEDED, 503 UNAVAILABLE), in ms. */
    readonly retryAfterMs?: number,
  ) {
    super(`${code}: ${message}`);
  }
}

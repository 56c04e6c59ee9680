import type { ErrorCode } from "./types.js";

/** An error answer of the API: the spec's code, the HTTP status and the request id. */
export class OrbitApiError extends Error {
  override readonly name = "OrbitApiError";
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly status: number,
    readonly requestId: string | undefined,
  ) {
    super(`${code}: ${message}`);
  }
}

/** The request never got an answer (after the retries): the outcome is unknown. */
export class OrbitNetworkError extends Error {
  override readonly name = "OrbitNetworkError";
  constructor(message: string, override readonly cause?: unknown) {
    super(message);
  }
}

// The HTTP envelope of docs/protocol.md §1: {request_id, data} on success,
// {request_id, error: {code, message}} on failure.
import type { ErrorCode } from "./errors.js";

export interface SuccessEnvelope<T> {
  request_id: string;
  data: T;
}

export interface ErrorEnvelope {
  request_id: string;
  error: { code: ErrorCode; message: string };
}

export const success = <T>(requestId: string, data: T): SuccessEnvelope<T> => ({ request_id: requestId, data });

export const failure = (requestId: string, code: ErrorCode, message: string): ErrorEnvelope => ({
  request_id: requestId,
  error: { code, message },
});

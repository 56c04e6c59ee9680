/**
 * The one error type of the wire layer: the client sent bytes that are not in the
 * contract's canonical form. Callers translate it to INVALID_ARGUMENT (HTTP) or a
 * protocol error (WebSocket) in their single error path; `field` names the offending
 * field or query parameter when there is one.
 *
 * Messages never echo more than 64 characters of client input (see `quote`), so a
 * hostile body cannot make our logs or error responses large.
 */
export class WireError extends Error {
  constructor(
    message: string,
    readonly field?: string,
  ) {
    super(message);
    this.name = "WireError";
  }
}

/** Longest slice of client input a message may contain, before quoting. */
const ECHO_LIMIT = 32;

/**
 * Quote client-supplied text for an error message: at most 32 input characters (half the
 * 64-character budget, so a message may quote one input plus our own words), JSON
 * escaped so control characters cannot forge log lines, with "…" when cut.
 */
export function quote(s: string): string {
  if (s.length <= ECHO_LIMIT) return JSON.stringify(s);
  return JSON.stringify(s.slice(0, ECHO_LIMIT)).slice(0, -1) + '…"';
}

// The Retry-After header of a 429 or 503 (openapi.yaml: "Retry-After: 1"), for the
// management client's retries and the consumer's reconnects alike.

/** Retry-After as delay-seconds or an HTTP date (RFC 9110 §10.2.3), in ms from now. */
export function parseRetryAfter(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  if (/^[0-9]+$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

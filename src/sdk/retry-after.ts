// The Retry-After header of a 429 or 503 (openapi.yaml: "Retry-After: 1"), for the
// management client's retries and the consumer's reconnects alike.

/**
 * The longest Retry-After obeyed: a node sends 1 s; a value of hours (a misconfigured
 * proxy, a date far ahead) would park a retry or a consumer's reconnect that long.
 */
export const RETRY_AFTER_MAX_MS = 60_000;

/** Retry-After as delay-seconds or an HTTP date (RFC 9110 §10.2.3), in ms from now, at most RETRY_AFTER_MAX_MS. */
export function parseRetryAfter(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  if (/^[0-9]+$/.test(v)) return Math.min(RETRY_AFTER_MAX_MS, Number(v) * 1000);
  // Each of RFC 9110's three date forms names the day (IMF-fixdate "Sun, 06 Nov 1994 …"):
  // Date.parse alone also reads "-1" or "1.5" as dates.
  if (!/^[A-Z][a-z]{2}[a-z]*,? /.test(v)) return undefined;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.min(RETRY_AFTER_MAX_MS, Math.max(0, at - Date.now()));
}

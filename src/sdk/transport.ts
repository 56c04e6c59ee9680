// A bearer token sent over plain http:// or ws:// can be read by anyone on the path. The
// SDK sends it in clear only to this machine (a loopback host), as in development and in
// the tests; anywhere else it needs https:// (wss://) unless the caller opts in.

/** Hosts that never leave this machine. */
function isLoopback(hostname: string): boolean {
  const h = hostname.replace(/^\[|\]$/g, "").toLowerCase();
  return h === "localhost" || h.endsWith(".localhost") || h === "::1" || /^127(\.\d{1,3}){3}$/.test(h);
}

/**
 * Throws a TypeError for an http:// or ws:// base URL whose host is not loopback, unless
 * `allowInsecure`: the token would travel unencrypted. Never names the token.
 */
export function requireSafeTransport(baseUrl: string, allowInsecure: boolean | undefined): void {
  const u = new URL(baseUrl);
  if (u.protocol === "https:" || u.protocol === "wss:" || allowInsecure === true || isLoopback(u.hostname)) return;
  throw new TypeError(
    `refusing to send the token unencrypted to ${u.host} (${u.protocol}//): use https://, or set allowInsecure: true`,
  );
}

// The request target as a path. A server must accept the absolute-form
// (`GET http://host/v1/tasks HTTP/1.1`, RFC 9112 §3.2.2), which clients send to proxies.
// Koa reads one as its path whatever host it names, and the upgrade listener, comparing
// the whole target with the event endpoint's path, would pass such an upgrade on as a
// plain request (426, though it offers orbit.events.v1). So both read the target here.

/** A target that starts like an absolute URI (a scheme, then "://"). */
const ABSOLUTE_LIKE = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//;
/** The absolute-form Orbit serves: http or https, an authority, then path and query. */
const ABSOLUTE_FORM = /^https?:\/\/([^/?#]*)([^#]*)$/i;

/**
 * The origin-form path and query of `url`: an absolute-form target is read as the path it
 * names when its authority is the Host header (RFC 9112 §3.2: a client sends them
 * identical), and is undefined otherwise (another host, another scheme). Left as they are:
 * the origin-form, and a CONNECT's authority-form or the asterisk-form (they name no path
 * Orbit has: 404 or 405).
 */
export function targetPath(url: string, host: string | undefined): string | undefined {
  if (!ABSOLUTE_LIKE.test(url)) return url;
  const m = ABSOLUTE_FORM.exec(url);
  if (!m || host === undefined || m[1]!.toLowerCase() !== host.toLowerCase()) return undefined;
  // "http://host?x" names the root path with a query (RFC 9112 §3.2.1).
  return m[2]!.startsWith("/") ? m[2]! : `/${m[2]!}`;
}

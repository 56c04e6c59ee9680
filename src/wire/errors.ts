// The one error catalogue. Every code of docs/protocol.md §7 (and Orbit's transport codes) appears
// here once, with its HTTP status and what a WebSocket connection does after sending it.
// The HTTP error middleware translates through this table and nothing else; a test
// checks it against the enums in openapi.yaml and events.schema.json in both directions.
// The `ws` column is the rule for a bound connection, and it is documentation: no code
// reads it. ws/event-session.ts decides at each call site whether to close (closeWithError)
// or stay (an error frame only), and the ws tests hold each case. A refused hello is the
// exception: its INVALID_ARGUMENT closes, because no session exists yet to stay in.

export type WsAfterError = "stay" | "close";

interface CatalogueEntry {
  readonly status: number;
  /** After an error frame with this code, does the connection stay open or close? */
  readonly ws: WsAfterError;
  /** Default client-facing message: short, never carrying input, SQL or secrets. */
  readonly message: string;
}

export const ERROR_CATALOGUE = {
  INVALID_ARGUMENT: { status: 400, ws: "stay", message: "the request is invalid" },
  UNAUTHENTICATED: { status: 401, ws: "close", message: "a valid bearer token is required" },
  PERMISSION_DENIED: { status: 403, ws: "close", message: "the credential lacks the action this needs" },
  NOT_FOUND: { status: 404, ws: "close", message: "not found" },
  METHOD_NOT_ALLOWED: { status: 405, ws: "close", message: "method not allowed on this path" },
  STATE_CONFLICT: { status: 409, ws: "stay", message: "the current state does not allow this" },
  IDEMPOTENCY_CONFLICT: { status: 409, ws: "stay", message: "this Idempotency-Key was used with different content" },
  SUBSCRIPTION_LIMIT: { status: 409, ws: "stay", message: "the namespace already has 64 subscriptions" },
  EVENT_HISTORY_EXPIRED: { status: 410, ws: "close", message: "the needed result history was purged" },
  PAYLOAD_TOO_LARGE: { status: 413, ws: "close", message: "the body exceeds 512 KiB" },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, ws: "close", message: "the body must be application/json" },
  PROTOCOL_REQUIRED: { status: 426, ws: "close", message: "Sec-WebSocket-Protocol orbit.events.v1 is required" },
  CAPACITY_EXCEEDED: { status: 429, ws: "close", message: "this node has no free event connection" },
  INTERNAL: { status: 500, ws: "close", message: "internal error" },
  NOT_IMPLEMENTED: { status: 501, ws: "close", message: "not implemented yet" },
  UNAVAILABLE: { status: 503, ws: "close", message: "temporarily unavailable; retry" },
  // WebSocket only: the ACK proof was replaced or is invalid; the connection stays.
  DELIVERY_LEASE_LOST: { status: 409, ws: "stay", message: "the delivery lease was replaced or the proof is invalid" },
} as const satisfies Record<string, CatalogueEntry>;

export type ErrorCode = keyof typeof ERROR_CATALOGUE;

export const ERROR_CODES = Object.keys(ERROR_CATALOGUE) as ErrorCode[];

/** Codes that exist only on the WebSocket; HTTP never answers with them. */
export const WS_ONLY_CODES: readonly ErrorCode[] = ["DELIVERY_LEASE_LOST"];

/**
 * An error meant for the client. Anything else thrown inside a handler is an internal
 * error and reaches the client as INTERNAL with no detail.
 */
export class OrbitError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  /** Extra response headers, e.g. Retry-After on 429/503. */
  readonly headers: Readonly<Record<string, string>>;

  constructor(code: ErrorCode, message?: string, headers: Record<string, string> = {}) {
    super(message ?? ERROR_CATALOGUE[code].message);
    this.name = "OrbitError";
    this.code = code;
    this.status = ERROR_CATALOGUE[code].status;
    this.headers = headers;
  }
}

export function isOrbitError(e: unknown): e is OrbitError {
  return e instanceof OrbitError;
}

// Small constructors for the codes used all over; they keep call sites short and the
// messages consistent.
export const invalidArgument = (message: string): OrbitError => new OrbitError("INVALID_ARGUMENT", message);
export const notFound = (): OrbitError => new OrbitError("NOT_FOUND");
export const unauthenticated = (): OrbitError => new OrbitError("UNAUTHENTICATED");
export const permissionDenied = (): OrbitError => new OrbitError("PERMISSION_DENIED");
export const stateConflict = (message?: string): OrbitError => new OrbitError("STATE_CONFLICT", message);
export const unavailable = (): OrbitError => new OrbitError("UNAVAILABLE", undefined, { "Retry-After": "1" });
export const notImplemented = (): OrbitError => new OrbitError("NOT_IMPLEMENTED");
/** 426 names the protocol to upgrade to (RFC 9110 §15.5.22) and the WebSocket version (RFC 6455 §4.4). */
export const protocolRequired = (message?: string): OrbitError =>
  new OrbitError("PROTOCOL_REQUIRED", message, {
    Upgrade: "websocket",
    Connection: "Upgrade",
    "Sec-WebSocket-Version": "13",
  });

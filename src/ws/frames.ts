// Client frames in, server frames out (docs/protocol.md §5-7, events.schema.json). Reading is three
// steps: strict JSON (duplicate keys, bad numbers), the envelope (protocol_version, type,
// message_id, the keys each type may carry), then the generated clientFrame validator.
// An envelope failure closes the connection with 1008; a body failure gets an
// INVALID_ARGUMENT error frame (protocol §7 table).
import { newHexId, wellFormedId } from "../wire/ids.js";
import * as frameValidators from "../../generated/ws/validators.js";
import type { ClientFrame, EventAck, EventsHello, EventsPing } from "../../generated/ws/frames.js";
import { MAX_JSON_DEPTH } from "../config/limits.js";
import type { ErrorCode } from "../wire/errors.js";
import { parseStrictJson } from "../wire/json.js";
import { patternRule } from "../wire/pattern-rules.js";

type Validate = ((d: unknown) => boolean) & {
  errors?: { instancePath: string; schemaPath?: string; keyword?: string; message?: string }[] | null;
};
const validateClientFrame = (frameValidators as unknown as Record<string, Validate>).clientFrame!;

const ID_RE = /^[0-9a-f]{32}$/;
const TYPES = new Set(["events.hello", "events.ping", "event.ack"]);
/** Keys each client frame may carry; a hello never has session_id, reply_to or error. */
const ALLOWED_KEYS: Readonly<Record<string, readonly string[]>> = {
  "events.hello": ["protocol_version", "type", "message_id", "body"],
  "events.ping": ["protocol_version", "type", "message_id", "session_id", "body"],
  "event.ack": ["protocol_version", "type", "message_id", "session_id", "body"],
};

export type ParsedFrame =
  | { readonly kind: "envelope-error"; readonly reason: string }
  | {
      readonly kind: "body-error";
      readonly type: string;
      readonly messageId: string;
      readonly sessionId?: string;
      readonly reason: string;
      readonly body: unknown;
    }
  | { readonly kind: "frame"; readonly frame: ClientFrame };

/**
 * An event.ack exactly as Orbit's SDK writes it (these keys in this order, no whitespace,
 * each value in its schema's own pattern: Id, an epoch of at most 19 digits — below 2^64 —,
 * LeaseSecret): such a text holds no duplicate or unknown key and no value of another
 * type, so it is the frame parseStrictFrame would return, without its strict parser and
 * validator (a node reads one ACK per delivery). Any other text, valid or
 * not, takes the strict path (a property test holds the two together).
 */
const SDK_ACK =
  /^\{"protocol_version":"1","type":"event\.ack","message_id":"([0-9a-f]{32})","session_id":"([0-9a-f]{32})","body":\{"delivery_id":"([0-9a-f]{32})","epoch":"(0|[1-9][0-9]{0,18})","lease_secret":"([A-Za-z0-9_-]{42}[AEIMQUYcgkosw048])"\}\}$/;

export function parseClientFrame(text: string): ParsedFrame {
  const ack = SDK_ACK.exec(text);
  if (ack === null) return parseStrictFrame(text);
  const [, messageId, sessionId, deliveryId, epoch, leaseSecret] = ack as unknown as string[];
  return {
    kind: "frame",
    frame: {
      protocol_version: "1",
      type: "event.ack",
      message_id: messageId!,
      session_id: sessionId!,
      body: { delivery_id: deliveryId!, epoch: epoch!, lease_secret: leaseSecret! },
    },
  };
}

/** Any client frame: strict JSON, the envelope, then the generated validator. */
export function parseStrictFrame(text: string): ParsedFrame {
  let value: unknown;
  try {
    value = parseStrictJson(text, { maxDepth: MAX_JSON_DEPTH }).value;
  } catch {
    return { kind: "envelope-error", reason: "not strict JSON" };
  }
  if (value === null || typeof value !== "object" || Array.isArray(value))
    return { kind: "envelope-error", reason: "not an object" };
  const o = value as Record<string, unknown>;
  if (o.protocol_version !== "1") return { kind: "envelope-error", reason: "protocol_version" };
  if (typeof o.type !== "string" || !TYPES.has(o.type)) return { kind: "envelope-error", reason: "type" };
  if (typeof o.message_id !== "string" || !ID_RE.test(o.message_id))
    return { kind: "envelope-error", reason: "message_id" };
  const allowed = ALLOWED_KEYS[o.type]!;
  if (Object.keys(o).some((k) => !allowed.includes(k)))
    return { kind: "envelope-error", reason: "a key this frame may not carry" };
  if (o.type !== "events.hello" && (typeof o.session_id !== "string" || !ID_RE.test(o.session_id))) {
    return { kind: "envelope-error", reason: "session_id" };
  }
  // A body that is missing or not an object is the body's fault, not the envelope's
  // (an invalid hello body gets INVALID_ARGUMENT with reply_to): the
  // validator below says so.
  if (!validateClientFrame(o)) {
    const e = validateClientFrame.errors?.[0];
    const at = e?.instancePath ? e.instancePath.replace(/^\/body\/?/, "").replace(/\//g, ".") : "body";
    return {
      kind: "body-error",
      type: o.type,
      messageId: o.message_id,
      ...(typeof o.session_id === "string" ? { sessionId: o.session_id } : {}),
      reason:
        `${at || "body"}: ${(e?.keyword === "pattern" ? patternRule(e.schemaPath) : undefined) ?? e?.message ?? "invalid"}`.slice(
          0,
          200,
        ),
      body: o.body,
    };
  }
  return { kind: "frame", frame: o as unknown as ClientFrame };
}

/** The subscription id of an invalid hello body, when it is a well-formed one (its scope is checked before the body). */
export function helloSubscriptionId(body: unknown): string | undefined {
  return wellFormedId(
    body !== null && typeof body === "object" ? (body as { subscription_id?: unknown }).subscription_id : undefined,
  );
}

export const isHello = (f: ClientFrame): f is EventsHello => f.type === "events.hello";
export const isPing = (f: ClientFrame): f is EventsPing => f.type === "events.ping";
export const isAck = (f: ClientFrame): f is EventAck => f.type === "event.ack";

const messageId = newHexId;

const base = (type: string) => ({ protocol_version: "1" as const, type, message_id: messageId() });

export function welcomeFrame(
  replyTo: string,
  body: {
    session_id: string;
    subscription_id: string;
    capacity: number;
    lease_duration_ms: number;
    heartbeat_interval_ms: number;
    server_time: string;
    enabled: boolean;
  },
) {
  return { ...base("events.welcome"), reply_to: replyTo, session_id: body.session_id, body };
}

/**
 * An event.deliver frame, as text: the event's JSON goes in as the claim made it
 * (toWireEventJson). The keys and their order are those of the other frames.
 */
export function deliverFrameText(sessionId: string, delivery: object, eventJson: string, leaseSecret: string): string {
  return `{"protocol_version":"1","type":"event.deliver","message_id":"${messageId()}","session_id":${JSON.stringify(sessionId)},\
"body":{"delivery":${JSON.stringify(delivery)},"event":${eventJson},"lease_secret":${JSON.stringify(leaseSecret)}}}`;
}

export function ackFrame(replyTo: string, sessionId: string, body: Record<string, unknown>) {
  return { ...base("ack"), reply_to: replyTo, session_id: sessionId, body };
}

/**
 * An ACK's receipt, as text: JSON.stringify(ackFrame(…)) but for the message id, without
 * the objects (one per delivery). Every value is an id, a uint64 string, a
 * timestamp or a boolean: nothing to escape.
 */
export function ackReceiptText(
  replyTo: string,
  sessionId: string,
  r: { delivery_id: string; event_id: string; epoch: string; acknowledged_at: string; deduplicated: boolean },
): string {
  return `{"protocol_version":"1","type":"ack","message_id":"${messageId()}","reply_to":"${replyTo}","session_id":"${sessionId}",\
"body":{"delivery_id":"${r.delivery_id}","event_id":"${r.event_id}","epoch":"${r.epoch}","acknowledged_at":"${r.acknowledged_at}",\
"deduplicated":${r.deduplicated}}}`;
}

/** An error frame: `error` and never `body`; reply_to for request errors; session_id once bound. */
export function errorFrame(code: ErrorCode, message: string, replyTo?: string, sessionId?: string) {
  return {
    ...base("error"),
    ...(replyTo ? { reply_to: replyTo } : {}),
    ...(sessionId ? { session_id: sessionId } : {}),
    error: { code, message },
  };
}

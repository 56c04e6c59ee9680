// Reads a JSON request body: application/json only, at most 512 KiB, valid UTF-8, then
// the strict parser (duplicate keys rejected at any depth).
import type { IncomingMessage } from "node:http";
import { MAX_BODY_BYTES, MAX_JSON_DEPTH } from "../config/limits.js";
import { OrbitError, invalidArgument } from "../wire/errors.js";
import { parseStrictJson, type StrictJsonResult } from "../wire/json.js";
import { WireError } from "../wire/wire-error.js";

const JSON_TYPE = /^application\/json\s*(;\s*charset\s*=\s*"?utf-8"?\s*)?$/i;

export function requestHasBody(req: IncomingMessage): boolean {
  const len = req.headers["content-length"];
  return (len !== undefined && len !== "0") || req.headers["transfer-encoding"] !== undefined;
}

export interface JsonBody extends StrictJsonResult {
  readonly text: string;
}

export async function readJsonBody(req: IncomingMessage): Promise<JsonBody> {
  // Node keeps the first of repeated Content-Type fields and drops the rest: a body
  // labelled twice (text/plain, then application/json) is not labelled application/json.
  const types = req.headersDistinct["content-type"] ?? [];
  if (types.length > 1)
    throw new OrbitError(
      "UNSUPPORTED_MEDIA_TYPE",
      "the body must be labelled application/json once: Content-Type is repeated",
    );
  const type = types[0];
  if (type === undefined || !JSON_TYPE.test(type)) throw new OrbitError("UNSUPPORTED_MEDIA_TYPE");
  // No content coding is decoded, so a coded body is refused rather than read as if
  // plain (compressed JSON would be "not valid UTF-8", plain JSON labelled gzip taken).
  // RFC 9110 §15.5.16: 415.
  const coding = req.headers["content-encoding"];
  if (coding !== undefined && coding.trim().toLowerCase() !== "identity") {
    throw new OrbitError("UNSUPPORTED_MEDIA_TYPE", "the body must be application/json without a content coding");
  }
  const declared = Number(req.headers["content-length"] ?? "0");
  if (declared > MAX_BODY_BYTES) throw new OrbitError("PAYLOAD_TOO_LARGE");
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) throw new OrbitError("PAYLOAD_TOO_LARGE");
      chunks.push(chunk);
    }
  } catch (e) {
    // A client that drops its upload: its socket's ECONNRESET is the client's, not the
    // database's — without this it would count as a database outage (503, and a worker
    // call's whole batch rolled back). Nobody reads the answer; it only must be right.
    if (e instanceof OrbitError) throw e;
    throw invalidArgument("the request body was cut off");
  }
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(Buffer.concat(chunks));
  } catch {
    throw invalidArgument("the body is not valid UTF-8");
  }
  if (text.length === 0) throw invalidArgument("the body must be a JSON object");
  try {
    return { ...parseStrictJson(text, { maxDepth: MAX_JSON_DEPTH }), text };
  } catch (e) {
    if (e instanceof WireError) throw invalidArgument(`the body is not strict JSON: ${e.message}`);
    throw e;
  }
}

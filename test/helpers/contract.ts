// Validate what the server sends: every response a test reads can be
// checked against the generated validator of its operation and status.
import { strict as assert } from "node:assert";
import * as httpValidators from "../../generated/http/validators.js";
import type { RawResponse } from "./http.js";

type Fn = ((d: unknown) => boolean) & { errors?: unknown };
const table = httpValidators as unknown as Record<string, Fn | undefined>;

/** Asserts the headers every response carries and the body the contract allows. */
export function assertContract(operationId: string, res: RawResponse): void {
  assertCommonHeaders(res);
  if (res.status === 204) {
    assert.equal(res.text, "");
    return;
  }
  const fn = table[`response_${operationId}_${res.status}`];
  assert.ok(fn, `openapi.yaml lists no ${res.status} response for ${operationId}`);
  assert.ok(
    fn(res.json),
    `${operationId} ${res.status} body breaks the contract: ${JSON.stringify(fn.errors)}\n${res.text}`,
  );
}

export function assertCommonHeaders(res: RawResponse): void {
  assert.match(String(res.headers["x-request-id"]), /^[0-9a-f]{32}$/, "X-Request-ID");
  assert.equal(res.headers["cache-control"], "no-store");
  if (res.text) {
    assert.equal(res.json?.request_id, res.headers["x-request-id"], "the envelope's request_id is the header's");
  }
}

/** An error envelope with exactly {request_id, error: {code, message}}. */
export function assertError(res: RawResponse, status: number, code: string): void {
  assertCommonHeaders(res);
  assert.equal(res.status, status, res.text);
  assert.deepEqual(Object.keys(res.json ?? {}).sort(), ["error", "request_id"], res.text);
  assert.equal(res.json.error.code, code, res.text);
  assert.equal(typeof res.json.error.message, "string");
  assert.deepEqual(Object.keys(res.json.error).sort(), ["code", "message"]);
}

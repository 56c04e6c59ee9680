// The error catalogue in code equals the error enums of both contracts, in both
// directions, each status in openapi.yaml is the catalogue's, and every code of the
// error table of docs/protocol.md §7 is in it with the status that table gives.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import YAML from "yaml";
import { ERROR_CATALOGUE, ERROR_CODES, WS_ONLY_CODES } from "../../src/wire/errors.js";

const openapi = YAML.parse(readFileSync("openapi.yaml", "utf8"));
const events = JSON.parse(readFileSync("events.schema.json", "utf8"));

describe("the error catalogue", () => {
  it("has exactly the codes of openapi.yaml's ErrorCode enum", () => {
    assert.deepEqual([...openapi.components.schemas.ErrorCode.enum].sort(), [...ERROR_CODES].sort());
  });

  it("has exactly the codes of events.schema.json's ErrorCode enum", () => {
    assert.deepEqual([...events.$defs.ErrorCode.enum].sort(), [...ERROR_CODES].sort());
  });

  it("holds every code of docs/protocol.md §7", () => {
    const spec = readFileSync("docs/protocol.md", "utf8");
    const table = spec.slice(spec.indexOf("| Error code |"));
    const codes = [...table.matchAll(/^\| ([A-Z_]+) \|/gm)].map((m) => m[1]!);
    assert.ok(codes.length >= 12);
    for (const c of codes) assert.ok(c in ERROR_CATALOGUE, `${c} is in the catalogue`);
  });

  it("maps each code to the status docs/protocol.md §7 gives it", () => {
    const expected: Record<string, number> = {
      INVALID_ARGUMENT: 400,
      UNAUTHENTICATED: 401,
      PERMISSION_DENIED: 403,
      NOT_FOUND: 404,
      STATE_CONFLICT: 409,
      IDEMPOTENCY_CONFLICT: 409,
      SUBSCRIPTION_LIMIT: 409,
      EVENT_HISTORY_EXPIRED: 410,
      PROTOCOL_REQUIRED: 426,
      CAPACITY_EXCEEDED: 429,
      UNAVAILABLE: 503,
    };
    for (const [code, status] of Object.entries(expected)) {
      assert.equal(ERROR_CATALOGUE[code as keyof typeof ERROR_CATALOGUE].status, status, code);
    }
  });

  it("lists under each openapi error response only codes of that status", () => {
    for (const [name, resp] of Object.entries<any>(openapi.components.responses)) {
      const schema = resp.content?.["application/json"]?.schema;
      const codes: string[] | undefined = schema?.properties?.error?.properties?.code?.enum;
      if (!codes) continue;
      const statuses = new Set(codes.map((c) => ERROR_CATALOGUE[c as keyof typeof ERROR_CATALOGUE].status));
      assert.equal(statuses.size, 1, `${name} mixes statuses`);
    }
  });

  it("lists 501 NOT_IMPLEMENTED on exactly the operations its description names", () => {
    // The description said "every operation"; the contract documents and the liveness,
    // readiness and metrics endpoints, which every build serves, never listed it.
    const without: string[] = [];
    for (const item of Object.values<any>(openapi.paths)) {
      for (const op of Object.values<any>(item))
        if (op?.operationId && !op.responses?.["501"]) without.push(op.operationId);
    }
    assert.deepEqual(without.sort(), [
      "getEventsSchema",
      "getLiveness",
      "getMetrics",
      "getOpenapiDocument",
      "getReadiness",
    ]);
    assert.match(
      openapi.info.description,
      /lists 501 NOT_IMPLEMENTED but the two contract documents\s+\(`getOpenapiDocument`, `getEventsSchema`\) and the liveness, readiness and metrics/,
    );
  });

  it("keeps WebSocket-only codes out of HTTP", () => {
    for (const c of WS_ONLY_CODES) assert.ok(ERROR_CODES.includes(c));
  });
});

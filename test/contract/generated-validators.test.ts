// The generated standalone validators (what the server and SDK actually run) agree with
// the examples of docs/protocol.md: frames by direction, HTTP bodies by operation.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import * as frames from "../../generated/ws/validators.js";
import * as http from "../../generated/http/validators.js";

type Fn = (d: unknown) => boolean;
const ws = frames as unknown as Record<string, Fn>;
const api = http as unknown as Record<string, Fn>;

const spec = readFileSync("docs/protocol.md", "utf8");
const examples = [...spec.matchAll(/```json\n([\s\S]*?)```/g)].map((m) => JSON.parse(m[1]!) as Record<string, any>);
const CLIENT = new Set(["events.hello", "events.ping", "event.ack"]);

describe("generated validators against the examples of docs/protocol.md", () => {
  const framesOnly = examples.filter((e) => typeof e.type === "string");

  it("finds the six frame examples (docs/protocol.md shows no error frame)", () => {
    assert.equal(framesOnly.length, 6);
  });

  for (const f of framesOnly) {
    it(`${f.type}: accepted by its own direction only`, () => {
      const own = CLIENT.has(f.type) ? "clientFrame" : "serverFrame";
      const other = own === "clientFrame" ? "serverFrame" : "clientFrame";
      assert.equal(ws[own]!(f), true);
      assert.equal(ws[other]!(f), false);
    });
  }

  it("accepts the create, configure and retry request examples for their operations", () => {
    const create = examples.find((e) => "name" in e && "queue_id" in e);
    const configure = examples.find((e) => "enabled" in e && "expected_revision" in e);
    const retry = examples.find((e) => "additional_attempts" in e);
    assert.equal(api.body_createSubscription!(create), true);
    assert.equal(api.body_configureSubscription!(configure), true);
    assert.equal(api.body_retryEventDelivery!(retry), true);
    assert.equal(api.body_createSubscription!({ ...create, extra: 1 }), false, "unknown field");
    assert.equal(api.body_configureSubscription!({ expected_revision: "1", enabled: false }), false, "reason required");
    assert.equal(api.body_retryEventDelivery!({ ...retry, additional_attempts: 101 }), false, "1-100 more attempts");
  });

  it("accepts the create response example as a 201 of createSubscription", () => {
    const response = examples.find((e) => "request_id" in e);
    assert.equal(api.response_createSubscription_201!(response), true);
    const bad = structuredClone(response)!;
    bad.data.subscription.cursor_sequence = "012";
    assert.equal(api.response_createSubscription_201!(bad), false, "non-canonical uint64");
  });
});

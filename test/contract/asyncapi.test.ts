// The generated AsyncAPI 3.0 document of the WebSocket protocol is valid for the
// official parser, and its messages are exactly the frames of events.schema.json.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { Parser, fromFile } from "@asyncapi/parser";
import { parse as parseYaml } from "yaml";

describe("generated/asyncapi.yaml", function () {
  this.timeout(30000);

  it("parses with no error or warning, with every frame as a message of the one channel", async () => {
    const { document, diagnostics } = await fromFile(new Parser(), "generated/asyncapi.yaml").parse();
    const serious = diagnostics.filter((d) => d.severity <= 1);
    assert.deepEqual(
      serious.map((d) => `${d.code}: ${d.message}`),
      [],
    );
    assert.ok(document);
    const channel = document.channels().get("events");
    assert.equal(channel?.address(), "/v1/events/connect");
    const names = channel!
      .messages()
      .all()
      .map((m) => m.name())
      .sort();
    assert.deepEqual(names, [
      "ack",
      "errorFrame",
      "eventAck",
      "eventDeliver",
      "eventsHello",
      "eventsPing",
      "eventsWelcome",
    ]);
    const events = JSON.parse(readFileSync("events.schema.json", "utf8"));
    for (const m of channel!.messages().all()) {
      const type = (m.payload()?.json() as any)?.properties?.type?.const;
      assert.equal(
        type,
        events.$defs[m.name()!].properties.type.const,
        `${m.name()} is the frame of events.schema.json`,
      );
    }
    // The upgrade's Authorization is the bearer token openapi.yaml states, not a looser one.
    const openapi = parseYaml(readFileSync("openapi.yaml", "utf8"));
    const headers = (channel!.bindings().get("ws")?.value() as any)?.headers;
    assert.equal(
      headers?.properties?.Authorization?.pattern,
      openapi.components.securitySchemes.bearerAuth["x-orbit-header-pattern"],
    );
    const ops = document.operations().all();
    assert.deepEqual(ops.map((o) => o.action()).sort(), ["receive", "send"]);
  });
});

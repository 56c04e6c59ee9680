// The SDK sends a bearer token in clear only to this machine: an http:// or ws:// base URL
// whose host is not loopback is refused before anything is sent, unless the caller opts in
// (allowInsecure). No node is needed: nothing may be sent at all.
import { strict as assert } from "node:assert";
import { Consumer, EventConnection, OrbitClient, Worker } from "../../src/sdk/index.js";
import { runCli } from "../helpers/orbit.js";

const TOKEN = `orbit_${"0".repeat(32)}_${"s".repeat(43)}`;
const ID = "0123456789abcdef0123456789abcdef";
const REMOTE = "http://orbit.example.invalid:8080";
const refused = (e: unknown) =>
  e instanceof TypeError && /unencrypted to orbit\.example\.invalid:8080/.test(e.message) && !e.message.includes(TOKEN);

describe("the SDK's transport rule", () => {
  it("refuses http:// to a host that is not loopback in every entry point, without naming the token", async () => {
    assert.throws(() => new OrbitClient({ baseUrl: REMOTE, token: TOKEN }), refused);
    assert.throws(
      () => new Worker({ baseUrl: REMOTE, token: TOKEN, queueId: ID, handler: async () => ({ outcome: "succeeded" }) }),
      refused,
    );
    assert.throws(
      () =>
        new Consumer({
          baseUrl: ["http://127.0.0.1:1", REMOTE],
          token: TOKEN,
          subscriptionId: ID,
          handler: async () => undefined,
        }),
      refused,
    );
    await assert.rejects(
      EventConnection.open({ baseUrl: REMOTE, token: TOKEN, subscriptionId: ID, capacity: 1 }),
      refused,
    );
  });

  it("takes https:// anywhere, plain http:// on loopback, and http:// elsewhere with allowInsecure", () => {
    for (const baseUrl of [
      "https://orbit.example.invalid",
      "http://127.0.0.1:8080",
      "http://127.8.9.10",
      "http://localhost:8080",
      "http://[::1]:8080",
    ])
      assert.doesNotThrow(() => new OrbitClient({ baseUrl, token: TOKEN }), baseUrl);
    assert.doesNotThrow(() => new OrbitClient({ baseUrl: REMOTE, token: TOKEN, allowInsecure: true }));
    assert.doesNotThrow(
      () =>
        new Consumer({
          baseUrl: REMOTE,
          token: TOKEN,
          subscriptionId: ID,
          allowInsecure: true,
          handler: async () => undefined,
        }),
    );
    // A look-alike of loopback is not loopback.
    assert.throws(() => new OrbitClient({ baseUrl: "http://127.0.0.1.example.invalid", token: TOKEN }), TypeError);
  });

  it("orbit listen refuses an http:// ORBIT_URL of another host: exit 2, nothing sent", async () => {
    const res = await runCli(["listen", "--subscription", ID], { ORBIT_URL: REMOTE, ORBIT_TOKEN: TOKEN });
    assert.equal(res.code, 2, res.stderr);
    assert.match(res.stderr, /ORBIT_URL: refusing to send the token unencrypted to orbit\.example\.invalid:8080/);
    assert.doesNotMatch(res.stderr, new RegExp(TOKEN));
  });
});

// ORBIT_TRUSTED_PROXIES and the client address of the access log (edge/client-address.ts):
// the list's syntax, and the walk of X-Forwarded-For from the right.
import { strict as assert } from "node:assert";
import type { IncomingMessage } from "node:http";
import { ConfigError } from "../../src/config/index.js";
import { parseTrustedProxies } from "../../src/config/trusted-proxies.js";
import { clientAddressOf } from "../../src/edge/client-address.js";

function req(peer: string | undefined, ...forwarded: string[]): IncomingMessage {
  return {
    socket: { remoteAddress: peer },
    headersDistinct: forwarded.length ? { "x-forwarded-for": forwarded } : {},
  } as unknown as IncomingMessage;
}

describe("trusted proxies", () => {
  it("reads addresses, CIDR blocks of both families and loopback; empty trusts none", () => {
    assert.deepEqual(parseTrustedProxies(undefined), []);
    assert.deepEqual(parseTrustedProxies(" "), []);
    assert.deepEqual(parseTrustedProxies("10.0.0.1, 10.1.0.0/16,fd00::/8"), [
      { address: "10.0.0.1", prefix: 32, family: "ipv4" },
      { address: "10.1.0.0", prefix: 16, family: "ipv4" },
      { address: "fd00::", prefix: 8, family: "ipv6" },
    ]);
    assert.deepEqual(parseTrustedProxies("loopback"), [
      { address: "127.0.0.0", prefix: 8, family: "ipv4" },
      { address: "::1", prefix: 128, family: "ipv6" },
    ]);
  });

  it("refuses anything else, naming the variable and the entry", () => {
    for (const bad of [
      "10.0.0.0/33",
      "fd00::/129",
      "10.0.0.0/08",
      "10.0.0.0/",
      "proxy.local",
      "10.0.0",
      "1.2.3.4,",
      "*",
      "10.0.0.1/8/8",
    ]) {
      assert.throws(
        () => parseTrustedProxies(bad),
        (e: unknown) => e instanceof ConfigError && /^ORBIT_TRUSTED_PROXIES must be /.test(e.message),
        bad,
      );
    }
  });

  describe("the client address", () => {
    const none = clientAddressOf([]);
    const trusting = clientAddressOf(parseTrustedProxies("127.0.0.1,10.0.0.0/8,fd00::/8"));

    it("is the peer when no proxy is trusted, or the peer is not one", () => {
      assert.equal(none(req("127.0.0.1", "203.0.113.7")), "127.0.0.1");
      assert.equal(trusting(req("192.0.2.1", "203.0.113.7")), "192.0.2.1");
      assert.equal(none(req("::ffff:192.0.2.1")), "192.0.2.1", "an IPv4-mapped peer as IPv4");
      assert.equal(none(req(undefined)), undefined, "a socket already gone");
    });

    it("walks X-Forwarded-For from the right past trusted proxies", () => {
      assert.equal(trusting(req("127.0.0.1")), "127.0.0.1");
      assert.equal(trusting(req("127.0.0.1", "")), "127.0.0.1");
      assert.equal(trusting(req("127.0.0.1", "203.0.113.7")), "203.0.113.7");
      assert.equal(trusting(req("::ffff:127.0.0.1", "203.0.113.7")), "203.0.113.7", "a mapped peer matches IPv4");
      assert.equal(trusting(req("10.2.3.4", "198.51.100.1, 10.9.9.9")), "198.51.100.1");
      assert.equal(trusting(req("fd00::5", "198.51.100.1, fd00::6")), "198.51.100.1");
      assert.equal(
        trusting(req("127.0.0.1", "6.6.6.6, 198.51.100.1")),
        "198.51.100.1",
        "the client's own entries are not believed",
      );
      assert.equal(trusting(req("127.0.0.1", "6.6.6.6", "198.51.100.1")), "198.51.100.1", "repeated headers, in order");
      assert.equal(trusting(req("127.0.0.1", "10.0.0.2, 10.0.0.1")), "10.0.0.2", "every hop trusted: the farthest");
    });

    it("takes an entry with a port, and stops at one that is no address", () => {
      assert.equal(trusting(req("127.0.0.1", "203.0.113.7:4711")), "203.0.113.7");
      assert.equal(trusting(req("127.0.0.1", "[2001:db8::1]:4711")), "2001:db8::1");
      assert.equal(trusting(req("127.0.0.1", "[2001:db8::1]")), "2001:db8::1");
      assert.equal(trusting(req("127.0.0.1", "::ffff:203.0.113.7")), "203.0.113.7");
      assert.equal(trusting(req("127.0.0.1", "unknown")), "127.0.0.1");
      assert.equal(trusting(req("127.0.0.1", "203.0.113.7, unknown, 10.0.0.3")), "10.0.0.3");
      assert.equal(trusting(req("127.0.0.1", "1.2.3.4:99999")), "127.0.0.1");
      assert.equal(trusting(req("127.0.0.1", "fe80::1%eth0")), "fe80::1%eth0", "a zone index: no proxy of ours");
    });
  });
});

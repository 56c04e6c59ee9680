// The SDK's reading of Retry-After (client retries and consumer reconnects): seconds or
// an HTTP date, never more than RETRY_AFTER_MAX_MS, nothing for a value it cannot read.
import { strict as assert } from "node:assert";
import { parseRetryAfter, RETRY_AFTER_MAX_MS } from "../../src/sdk/retry-after.js";

describe("SDK Retry-After", () => {
  it("reads delay-seconds and HTTP dates, in ms", () => {
    assert.equal(parseRetryAfter("1"), 1000);
    assert.equal(parseRetryAfter("0"), 0);
    const inTen = parseRetryAfter(new Date(Date.now() + 10_000).toUTCString())!;
    assert.ok(inTen > 8000 && inTen <= 10_000, String(inTen));
    assert.equal(parseRetryAfter(new Date(Date.now() - 60_000).toUTCString()), 0, "a date gone by: at once");
  });

  it("caps a long one at 60 s, so that a proxy's 'come back tomorrow' does not park a consumer", () => {
    assert.equal(RETRY_AFTER_MAX_MS, 60_000);
    assert.equal(parseRetryAfter("86400"), 60_000);
    assert.equal(parseRetryAfter("99999999999999999999"), 60_000);
    assert.equal(parseRetryAfter(new Date(Date.now() + 86_400_000).toUTCString()), 60_000);
  });

  it("ignores what it cannot read", () => {
    for (const v of [undefined, "", "-1", "1.5", "soon", " 1"]) assert.equal(parseRetryAfter(v), undefined, String(v));
  });
});

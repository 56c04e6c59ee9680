import { strict as assert } from "node:assert";
import fc from "fast-check";
import { ackFrame, ackReceiptText, parseClientFrame, parseStrictFrame } from "../../src/ws/frames.js";

const hex32 = fc.stringMatching(/^[0-9a-f]{32}$/);
const epoch = fc
  .oneof(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), fc.bigInt({ min: 0n, max: 10n ** 19n }))
  .map(String);
const secret = fc.stringMatching(/^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$/);

/** An event.ack as the SDK writes it (JSON.stringify of its object, keys in its order). */
const sdkAck = fc.record({ m: hex32, s: hex32, d: hex32, e: epoch, l: secret }).map(({ m, s, d, e, l }) =>
  JSON.stringify({
    protocol_version: "1",
    type: "event.ack",
    message_id: m,
    session_id: s,
    body: { delivery_id: d, epoch: e, lease_secret: l },
  }),
);

/** The same text with one character replaced, inserted or removed somewhere. */
const nearMiss = fc
  .tuple(
    sdkAck,
    fc.nat(),
    fc.constantFrom("replace", "insert", "remove"),
    fc.constantFrom(...' "{}:,0aA9_-.Zx\\\u00e9'),
  )
  .map(([t, at, how, c]) => {
    const i = at % t.length;
    return how === "replace"
      ? t.slice(0, i) + c + t.slice(i + 1)
      : how === "insert"
        ? t.slice(0, i) + c + t.slice(i)
        : t.slice(0, i) + t.slice(i + 1);
  });

describe("client frames: the SDK's ACKs read without the strict parser", () => {
  it("reads an SDK ACK exactly as the strict path does", () => {
    fc.assert(
      fc.property(sdkAck, (t) => {
        const fast = parseClientFrame(t);
        assert.equal(fast.kind, "frame");
        assert.deepEqual(fast, parseStrictFrame(t));
      }),
      { numRuns: 1000 },
    );
  });

  it("agrees with the strict path on every other text: near misses, duplicates, other orders, out of range", () => {
    fc.assert(
      fc.property(nearMiss, (t) => assert.deepEqual(parseClientFrame(t), parseStrictFrame(t))),
      { numRuns: 3000 },
    );
    const [m, s, d] = ["a".repeat(32), "b".repeat(32), "c".repeat(32)];
    const l = "A".repeat(43);
    for (const t of [
      `{"protocol_version":"1","type":"event.ack","message_id":"${m}","session_id":"${s}","body":{"delivery_id":"${d}","epoch":"18446744073709551616","lease_secret":"${l}"}}`,
      `{"protocol_version":"1","type":"event.ack","message_id":"${m}","session_id":"${s}","body":{"epoch":"1","delivery_id":"${d}","lease_secret":"${l}"}}`,
      `{"protocol_version":"1","type":"event.ack","message_id":"${m}","message_id":"${m}","session_id":"${s}","body":{"delivery_id":"${d}","epoch":"1","lease_secret":"${l}"}}`,
      `{"protocol_version":"1","type":"event.ack","message_id":"${m}","session_id":"${s}","body":{"delivery_id":"${d}","epoch":"01","lease_secret":"${l}"}}`,
      `{"protocol_version":"1","type":"event.ack","message_id":"${m}","session_id":"${s}","body":{"delivery_id":"${d}","epoch":"1","lease_secret":"${"A".repeat(42)}B"}}`,
    ]) {
      assert.deepEqual(parseClientFrame(t), parseStrictFrame(t), t);
    }
  });

  it("writes an ACK receipt as JSON.stringify of its frame would, but for the message id", () => {
    const r = {
      delivery_id: "3".repeat(32),
      event_id: "5".repeat(32),
      epoch: "18446744073709551615",
      acknowledged_at: "2026-11-30T21:00:00.123Z",
      deduplicated: true,
    };
    for (const receipt of [r, { ...r, epoch: "1", deduplicated: false }]) {
      const text = ackReceiptText("a".repeat(32), "b".repeat(32), receipt);
      const id = (JSON.parse(text) as { message_id: string }).message_id;
      assert.match(id, /^[0-9a-f]{32}$/);
      assert.equal(text, JSON.stringify({ ...ackFrame("a".repeat(32), "b".repeat(32), receipt), message_id: id }));
    }
  });
});

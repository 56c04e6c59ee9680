import { strict as assert } from "node:assert";
import fc from "fast-check";
import { formatTimestamp, isTimestamp } from "../../src/wire/time.js";

describe("wire/time", () => {
  it("formats any date in 0000-9999 as RFC 3339 UTC with milliseconds, accepted by isTimestamp", () => {
    const dates = fc.date({
      min: new Date("0000-01-01T00:00:00.000Z"),
      max: new Date("9999-12-31T23:59:59.999Z"),
      noInvalidDate: true,
    });
    fc.assert(
      fc.property(dates, (d) => {
        const s = formatTimestamp(d);
        assert.match(s, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
        assert.ok(isTimestamp(s), s);
        assert.equal(new Date(s).getTime(), d.getTime());
      }),
    );
  });

  it("formats a literal date", () => {
    assert.equal(formatTimestamp(new Date(Date.UTC(2026, 8, 17, 10, 0, 0, 5))), "2026-09-17T10:00:00.005Z");
  });

  it("refuses invalid dates and years outside 0000-9999", () => {
    for (const d of [
      new Date(Number.NaN),
      new Date("+010000-01-01T00:00:00.000Z"),
      new Date("-000001-01-01T00:00:00.000Z"),
    ]) {
      assert.throws(() => formatTimestamp(d), RangeError);
    }
  });

  it("isTimestamp accepts only the emitted form", () => {
    for (const s of [
      "2026-09-17T10:00:00Z",
      "2026-09-17T10:00:00.0Z",
      "2026-09-17T10:00:00.000+00:00",
      "2026-09-17t10:00:00.000z",
      "2026-09-17 10:00:00.000Z",
      "2026-02-30T10:00:00.000Z",
      "2026-09-17T24:00:00.000Z",
      "2026-13-01T00:00:00.000Z",
      "+002026-09-17T10:00:00.000Z",
      " 2026-09-17T10:00:00.000Z",
      "",
    ]) {
      assert.equal(isTimestamp(s), false, s);
    }
    assert.equal(isTimestamp(12), false);
    assert.ok(isTimestamp("2024-02-29T23:59:59.999Z"));
  });
});

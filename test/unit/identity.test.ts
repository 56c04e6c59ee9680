// Tokens: the exact format of docs/tasks.md, and nothing else, parses.
import { strict as assert } from "node:assert";
import fc from "fast-check";
import { bearerToken, digestSecret, issueToken, newId, parseToken } from "../../src/domain/identity.js";

describe("tokens", () => {
  it("issues orbit_<id>_<43 base64url> and parses it back to the same secret digest", () => {
    for (let i = 0; i < 50; i++) {
      const id = newId();
      const { token, digest } = issueToken(id);
      assert.match(token, /^orbit_[0-9a-f]{32}_[A-Za-z0-9_-]{43}$/);
      const parsed = parseToken(token);
      assert.ok(parsed);
      assert.equal(parsed.credentialId, id);
      assert.deepEqual(digestSecret(parsed.secret), digest);
    }
  });

  it("rejects every malformed token", () => {
    const good = issueToken(newId()).token;
    const [, id, secret] = /^orbit_([0-9a-f]{32})_(.{43})$/.exec(good)!;
    const bad = [
      "",
      good.toUpperCase(),
      `Orbit_${id}_${secret}`,
      `orbit_${id!.toUpperCase()}_${secret}`,
      `orbit_${id!.slice(1)}_${secret}`,
      `orbit_${id}_${secret!.slice(1)}`,
      `orbit_${id}_${secret}A`,
      `orbit_${id}_${secret!.slice(0, 42)}=`,
      `orbit_${id}_${secret!.slice(0, 42)}B`, // non-zero trailing bits: not canonical
      `orbit_${id}_+${secret!.slice(1)}`, // standard base64 alphabet, not base64url
      `orbit_${id}__${secret}`,
      ` ${good}`,
      `${good} `,
    ];
    for (const t of bad) assert.equal(parseToken(t), undefined, JSON.stringify(t));
  });

  it("never parses a random string", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 100 }), (s) => {
        const p = parseToken(s);
        return p === undefined || /^orbit_[0-9a-f]{32}_[A-Za-z0-9_-]{43}$/.test(s);
      }),
    );
  });

  it("reads the bearer scheme case-insensitively and nothing else", () => {
    assert.equal(bearerToken("Bearer abc"), "abc");
    assert.equal(bearerToken("bearer abc"), "abc");
    assert.equal(bearerToken("Basic abc"), undefined);
    assert.equal(bearerToken("Bearer  abc"), undefined);
    assert.equal(bearerToken("Bearer abc def"), undefined);
    assert.equal(bearerToken("Bearer"), undefined);
    assert.equal(bearerToken(undefined), undefined);
  });
});

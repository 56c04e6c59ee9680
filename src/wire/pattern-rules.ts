// What a contract pattern means, in words, for error messages. A validator's own message
// quotes the pattern: Uint64String's is hundreds of characters of regular expression (an HTTP
// expected_revision "01" or a WebSocket ACK epoch "01" would answer it all, cut at 200 in
// the error frame). Keyed by the schema's name, the same in openapi.yaml's components and in
// events.schema.json's $defs, as the validator's schemaPath names it.
const PATTERN_RULES: Readonly<Record<string, string>> = {
  Uint64String:
    "must be a canonical decimal uint64 (0 to 18446744073709551615; no sign, leading zero, fraction, exponent or whitespace)",
  Id: "must be 32 lowercase hex characters",
  LeaseSecret:
    "must be the lease_secret as event.deliver gave it: 43 characters of canonical unpadded base64url (32 bytes)",
  Timestamp: "must be an RFC 3339 UTC timestamp ending in Z (up to 9 fraction digits)",
};

/** The rule in words for a failed `pattern` keyword at schemaPath, if the schema is a named one. */
export function patternRule(schemaPath: string | undefined): string | undefined {
  const name = /#\/\$defs\/([A-Za-z0-9]+)\/pattern$/.exec(schemaPath ?? "")?.[1];
  return name === undefined ? undefined : PATTERN_RULES[name];
}

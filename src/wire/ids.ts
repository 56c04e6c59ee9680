// Ids on the wire and in the database: 32 lowercase hex characters of 16 random bytes
// (entities, sessions, request and message ids). Ids are names, not secrets; lease
// secrets and tokens take their own randomBytes. (A pooled buffer refilled 256 ids at a
// time was tried: no difference in orbit.append over 3 alternating runs.)
import { randomBytes } from "node:crypto";

export function newHexId(): string {
  return randomBytes(16).toString("hex");
}

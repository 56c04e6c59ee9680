/** The wire layer: strict decoding of client input and canonical encodings. A leaf. */
export { WireError } from "./wire-error.js";
export {
  parseStrictJson,
  DEFAULT_MAX_DEPTH,
  HARD_MAX_DEPTH,
  type StrictJsonResult,
  type StrictJsonOptions,
} from "./json.js";
export { parseUint64, isUint64, formatUint64, UINT64_MAX } from "./uint64.js";
export { decodeBase64urlCanonical, encodeBase64url } from "./base64url.js";
export { parseQuery } from "./query.js";
export { formatTimestamp, isTimestamp } from "./time.js";
export { newHexId, newRowId, rowIdPrefix } from "./ids.js";

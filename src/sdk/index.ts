// The Orbit SDK: the management client (this issue), typed from the contract.
export { OrbitClient, type OrbitClientOptions, type WithRaw } from "./client.js";
export { OrbitApiError, OrbitNetworkError } from "./errors.js";
export { RawJson } from "./raw-json.js";
export type * from "./types.js";

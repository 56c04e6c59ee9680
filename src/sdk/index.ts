// The Orbit SDK: the management client, the event connection and the automatic
// consumer, the automatic worker, typed from the contract.
export { OrbitClient, type OrbitClientOptions, type WithRaw } from "./client.js";
export { OrbitApiError, OrbitNetworkError } from "./errors.js";
export { RawJson } from "./raw-json.js";
export {
  EventConnection,
  OrbitEventError,
  SUBPROTOCOL,
  type Delivery,
  type Proof,
  type Welcome,
  type AckReceipt,
  type Closed,
  type EventConnectionOptions,
} from "./event-connection.js";
export { Consumer, type ConsumerOptions, type StopOptions, type StopReason } from "./consumer.js";
export {
  Worker,
  type WorkerOptions,
  type WorkerOutcome,
  type WorkerContext,
  type RefusedCompletion,
  type WorkerStopOptions,
  type WorkerStopReason,
} from "./worker.js";
export type * from "./types.js";

// The contract's types, re-exported under their schema names for SDK users.
import type { components } from "../../generated/http/openapi-types.js";

type S = components["schemas"];
export type Subscription = S["Subscription"];
export type CreateSubscriptionRequest = S["CreateSubscriptionRequest"];
export type ConfigureSubscriptionRequest = S["ConfigureSubscriptionRequest"];
export type SubscriptionResult = S["SubscriptionResult"];
export type SubscriptionList = S["SubscriptionList"];
export type EventDelivery = S["EventDelivery"];
export type ResultEvent = S["ResultEvent"];
export type EventDeliveryList = S["EventDeliveryList"];
export type EventDeliveryDetail = S["EventDeliveryDetail"];
export type RetryEventDeliveryRequest = S["RetryEventDeliveryRequest"];
export type DeliveryResult = S["DeliveryResult"];
export type DeliveryState = S["DeliveryState"];
export type Task = S["Task"];
export type SubmitTaskRequest = S["SubmitTaskRequest"];
export type TaskResult = S["TaskResult"];
export type CancelTaskRequest = S["CancelTaskRequest"];
export type ResolveTaskRequest = S["ResolveTaskRequest"];
export type ClaimTaskRequest = S["ClaimTaskRequest"];
export type ClaimResult = S["ClaimResult"];
export type CompleteAttemptRequest = S["CompleteAttemptRequest"];
export type RequeueAttemptRequest = S["RequeueAttemptRequest"];
export type AttemptResult = S["AttemptResult"];
export type Credential = S["Credential"];
export type ErrorCode = S["ErrorCode"];

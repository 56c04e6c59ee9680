// The management SDK (docs/protocol.md §8): one method per HTTP operation, typed from the contract.
// Every write takes the caller's idempotency key; when the network fails (or the node
// answers 503) the SAME request is sent again with the SAME key, so a write is never
// doubled and a lost answer is recovered as the original receipt (deduplicated=true).
// Persist the key before calling, and reuse it after a crash (docs/protocol.md §2).
//
// Which calls are sent again, and why:
// - reads (GET) and the keyed writes: after any network failure and after a 503;
// - completeAttempt, completeAttempts and requeueAttempt: the same, without a key — a stale
//   attempt takes the identical repeat of the call that ended it (200, nothing written;
//   docs/tasks.md), so a batch repeated answers each item as before;
// - claimTask and claimTasks are NOT idempotent (worker calls carry no key): a claim whose connection failed
//   after the request may have reached the node, or that was answered 503, may have taken a
//   task, and sending it again would take a second one while the first stays RUNNING until
//   its lease runs out (an attempt used, effect_uncertain). It is sent again only when the
//   request provably never left this process (no connection was ever made: refused,
//   unreachable, DNS, connect timeout); otherwise the caller gets OrbitNetworkError (or the
//   503's OrbitApiError) and decides. A 503 is no proof of "nothing taken": the node's
//   deadline is checked before COMMIT but may fire while the COMMIT is in flight, and a
//   database connection lost at COMMIT answers 503 with the outcome unknown.
import http from "node:http";
import https from "node:https";
import { OrbitApiError, OrbitNetworkError } from "./errors.js";
import { stringifyBody, type RawJson } from "./raw-json.js";
import { parseRetryAfter } from "./retry-after.js";
import { requireSafeTransport } from "./transport.js";
import type * as T from "./types.js";

export interface OrbitClientOptions {
  /** e.g. "http://127.0.0.1:8080" (production: https). */
  readonly baseUrl: string;
  /** Send the token over plain http:// to a host that is not loopback (default false: refused). */
  readonly allowInsecure?: boolean;
  readonly token: string;
  /**
   * Extra attempts after a network failure or 503 (default 3); claimTask only when its
   * request never left this process (see the top of this file).
   */
  readonly retries?: number;
  /** Per-attempt timeout in ms (default 15000; a claim adds its wait_ms). */
  readonly timeoutMs?: number;
  /** First back-off in ms, doubled each retry, with jitter (default 100). */
  readonly backoffMs?: number;
}

interface Call {
  readonly method: "GET" | "POST";
  readonly path: string;
  readonly query?: Record<string, string | number | undefined>;
  readonly key?: string;
  readonly body?: unknown;
  readonly timeoutMs?: number;
  /**
   * false: the call may not be repeated once its request may have reached the node (only
   * the claims); default true (a GET, a keyed write, or a worker call idempotent by body).
   */
  readonly idempotent?: boolean;
  /** Gives the call up: an answer still awaited is dropped, and no attempt follows. */
  readonly signal?: AbortSignal;
}

/** A request whose JSON-valued field K may also be given as RawJson (exact text). */
export type WithRaw<R, K extends keyof R> = Omit<R, K> & { [P in K]?: R[P] | RawJson };

type Envelope<D> =
  { request_id: string; data: D } | { request_id: string; error: { code: T.ErrorCode; message: string } };

const seg = (id: string) => encodeURIComponent(id);

export class OrbitClient {
  private readonly baseUrl: string;
  private readonly retries: number;
  private readonly timeoutMs: number;
  private readonly backoffMs: number;
  // node:http with a keep-alive agent instead of the global fetch (undici): it costs a
  // fraction of the client CPU per request, which the orbit.append benchmark (client and
  // node on one 2-core machine) pays per result. Idle sockets are unref'd by the agent, so
  // a client never keeps a process alive.
  // #private, as the token: util.inspect (a logged client, a REPL) shows TypeScript's
  // private fields, and a socket the agent holds until a response's end has been handled
  // still carries the request's Authorization header.
  readonly #agent: http.Agent;
  readonly #token: string;

  constructor(options: OrbitClientOptions) {
    requireSafeTransport(options.baseUrl, options.allowInsecure);
    this.#token = options.token;
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.retries = options.retries ?? 3;
    this.timeoutMs = options.timeoutMs ?? 15000;
    this.backoffMs = options.backoffMs ?? 100;
    this.#agent =
      new URL(this.baseUrl).protocol === "https:"
        ? new https.Agent({ keepAlive: true })
        : new http.Agent({ keepAlive: true });
  }

  // ---- subscriptions (docs/protocol.md §2-4) ----

  createSubscription(key: string, req: T.CreateSubscriptionRequest): Promise<T.SubscriptionResult> {
    return this.call({ method: "POST", path: "/v1/subscriptions", key, body: req });
  }

  listSubscriptions(q: { queue_id: string; limit?: number; cursor?: string }): Promise<T.SubscriptionList> {
    return this.call({ method: "GET", path: "/v1/subscriptions", query: q });
  }

  getSubscription(id: string): Promise<T.Subscription> {
    return this.call({ method: "GET", path: `/v1/subscriptions/${seg(id)}` });
  }

  configureSubscription(id: string, key: string, req: T.ConfigureSubscriptionRequest): Promise<T.SubscriptionResult> {
    return this.call({ method: "POST", path: `/v1/subscriptions/${seg(id)}:configure`, key, body: req });
  }

  listEventDeliveries(
    id: string,
    q: { state?: T.DeliveryState; limit?: number; cursor?: string } = {},
  ): Promise<T.EventDeliveryList> {
    return this.call({ method: "GET", path: `/v1/subscriptions/${seg(id)}/deliveries`, query: q });
  }

  getEventDelivery(id: string, deliveryId: string): Promise<T.EventDeliveryDetail> {
    return this.call({ method: "GET", path: `/v1/subscriptions/${seg(id)}/deliveries/${seg(deliveryId)}` });
  }

  retryEventDelivery(
    id: string,
    deliveryId: string,
    key: string,
    req: T.RetryEventDeliveryRequest,
  ): Promise<T.DeliveryResult> {
    return this.call({
      method: "POST",
      path: `/v1/subscriptions/${seg(id)}/deliveries/${seg(deliveryId)}:retry`,
      key,
      body: req,
    });
  }

  // ---- tasks and workers (docs/tasks.md) ----

  submitTask(key: string, req: WithRaw<T.SubmitTaskRequest, "input"> & { input: unknown }): Promise<T.TaskResult> {
    return this.call({ method: "POST", path: "/v1/tasks", key, body: req });
  }

  getTask(id: string): Promise<T.Task> {
    return this.call({ method: "GET", path: `/v1/tasks/${seg(id)}` });
  }

  cancelTask(id: string, key: string, req: T.CancelTaskRequest): Promise<T.TaskResult> {
    return this.call({ method: "POST", path: `/v1/tasks/${seg(id)}:cancel`, key, body: req });
  }

  resolveTask(id: string, key: string, req: WithRaw<T.ResolveTaskRequest, "result">): Promise<T.TaskResult> {
    return this.call({ method: "POST", path: `/v1/tasks/${seg(id)}:resolve`, key, body: req });
  }

  /**
   * Long-polls up to wait_ms; undefined when no task came (204). Not idempotent, so sent
   * again only when no connection was ever made: after a failure once the request may
   * have reached the node it throws OrbitNetworkError, and a 503 throws OrbitApiError
   * UNAVAILABLE at once — a task may have been claimed; if so it is QUEUED again when its
   * lease runs out (one attempt used, effect_uncertain). Claim again when you choose.
   */
  claimTask(req: T.ClaimTaskRequest): Promise<T.ClaimResult | undefined> {
    return this.call({
      method: "POST",
      path: "/v1/worker/claim",
      body: req,
      timeoutMs: this.timeoutMs + (req.wait_ms ?? 0),
      idempotent: false,
    });
  }

  /**
   * claimTask for up to max_tasks (1-32) tasks in one request: the claims, oldest first, as
   * soon as at least one task is there; undefined when none came within wait_ms (204). Not
   * idempotent: sent again only as claimTask is. `signal` gives up the long-poll (the node
   * then takes no task, unless its COMMIT was already under way): OrbitNetworkError.
   */
  claimTasks(req: T.ClaimTasksRequest, o: { signal?: AbortSignal } = {}): Promise<T.ClaimTasksResult | undefined> {
    return this.call({
      method: "POST",
      path: "/v1/worker/claims",
      body: req,
      timeoutMs: this.timeoutMs + (req.wait_ms ?? 0),
      idempotent: false,
      ...(o.signal ? { signal: o.signal } : {}),
    });
  }

  /** Sent again after a network failure or 503: the identical repeat answers 200 and writes nothing. */
  completeAttempt(attemptId: string, req: WithRaw<T.CompleteAttemptRequest, "result">): Promise<T.AttemptResult> {
    return this.call({ method: "POST", path: `/v1/worker/attempts/${seg(attemptId)}:complete`, body: req });
  }

  /**
   * Several completeAttempt calls in one request (1-32 items, distinct attempts): one answer
   * per item, in order, each with its status (200 with the task; 400, 404 or 409 with the
   * error; narrow on `status`). Sent again after a network failure or 503, as
   * completeAttempt: every item then answers as before, and nothing is written twice.
   */
  completeAttempts(req: { items: WithRaw<T.CompleteAttemptsItem, "result">[] }): Promise<T.CompleteAttemptsResult> {
    return this.call({ method: "POST", path: "/v1/worker/completions", body: req });
  }

  /** Sent again after a network failure or 503, as completeAttempt. */
  requeueAttempt(attemptId: string, req: T.RequeueAttemptRequest): Promise<T.AttemptResult> {
    return this.call({ method: "POST", path: `/v1/worker/attempts/${seg(attemptId)}:requeue`, body: req });
  }

  getCurrentCredential(): Promise<T.Credential> {
    return this.call({ method: "GET", path: "/v1/credential" });
  }

  // ---- transport ----

  private async call<D>(c: Call): Promise<D> {
    const url = new URL(this.baseUrl + c.path);
    for (const [k, v] of Object.entries(c.query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v));
    const headers: Record<string, string> = { Authorization: `Bearer ${this.#token}` };
    if (c.key !== undefined) headers["Idempotency-Key"] = c.key;
    const body = c.body === undefined ? undefined : stringifyBody(c.body);
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (body !== undefined) headers["Content-Length"] = String(Buffer.byteLength(body));
    let lastError: unknown;
    for (let attempt = 0; attempt <= this.retries; attempt++) {
      // Never sooner than the node's Retry-After (1 s on a 503): earlier retries only meet
      // the same overload or timeout again.
      const retryAfterMs = lastError instanceof OrbitApiError ? (lastError.retryAfterMs ?? 0) : 0;
      if (attempt > 0) await sleep(Math.max(retryAfterMs, this.backoffMs * 2 ** (attempt - 1) * (0.5 + Math.random())));
      if (c.signal?.aborted) throw new OrbitNetworkError(`${c.method} ${c.path}: aborted`, c.signal.reason);
      let res: Answer;
      try {
        res = await send(this.#agent, url, c.method, headers, body, c.timeoutMs ?? this.timeoutMs, c.signal);
      } catch (e) {
        // (A request that could not even be built threw before anything was sent.)
        const failure = e instanceof NotAnswered ? e : new NotAnswered(e, false);
        if (c.idempotent === false && failure.mayHaveReached) {
          throw new OrbitNetworkError(
            `${c.method} ${c.path}: no answer, and the request may have reached the node; not sent again (the call is not idempotent)`,
            failure.cause,
          );
        }
        lastError = failure.cause; // no (whole) answer: the same request, the same key, again
        continue;
      }
      if (res.status === 204) return undefined as D;
      const env = parseEnvelope<D>(res.text);
      if (env && "data" in env) return env.data;
      // Without the envelope the answer comes from something in front of the node (a proxy,
      // a balancer during a deploy): its 503 is retried as the node's own.
      const err = env
        ? new OrbitApiError(env.error.code, env.error.message, res.status, env.request_id, res.retryAfterMs)
        : new OrbitApiError(
            res.status === 503 ? "UNAVAILABLE" : "INTERNAL",
            `unexpected answer with status ${res.status}`,
            res.status,
            res.requestId,
            res.retryAfterMs,
          );
      // A 503 of a call that is not idempotent: the node may have done it all the same.
      if (err.code !== "UNAVAILABLE" || c.idempotent === false) throw err;
      lastError = err;
    }
    if (lastError instanceof OrbitApiError) throw lastError;
    throw new OrbitNetworkError(`${c.method} ${c.path}: no answer after ${this.retries + 1} attempts`, lastError);
  }
}

interface Answer {
  readonly status: number;
  readonly requestId: string | undefined;
  readonly retryAfterMs: number | undefined;
  readonly text: string;
}

/** Why an attempt got no (whole) answer, and whether its request may have reached the node. */
class NotAnswered {
  constructor(
    readonly cause: unknown,
    /** false only when no connection was ever made for it: nothing of the request left this process. */
    readonly mayHaveReached: boolean,
  ) {}
}

/**
 * One attempt: resolves with the whole answer, rejects with NotAnswered when the
 * connection fails before the answer is complete or the attempt outlives `timeoutMs` (the
 * timer covers the request and the whole response body).
 */
function send(
  agent: http.Agent,
  url: URL,
  method: string,
  headers: Record<string, string>,
  body: string | undefined,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const request = url.protocol === "https:" ? https.request : http.request;
    const req = request(url, { method, headers, agent, ...(signal ? { signal } : {}) }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => {
        clearTimeout(timer);
        const id = res.headers["x-request-id"];
        resolve({
          status: res.statusCode ?? 0,
          requestId: typeof id === "string" ? id : undefined,
          retryAfterMs: parseRetryAfter(res.headers["retry-after"]),
          text: Buffer.concat(chunks).toString("utf8"),
        });
      });
      res.on("error", fail);
      // Cut mid-body: "close" without "end".
      res.on("close", () => {
        if (!res.complete) fail(new Error("the connection closed before the answer was complete"));
      });
    });
    // A socket of the agent's pool is connected already: what is written on it may arrive.
    // A new one holds the request until it connects; failing before that, nothing was sent.
    let connected = false;
    req.on("socket", (socket) => {
      if (!socket.connecting) connected = true;
      else socket.once("connect", () => (connected = true));
    });
    const timer = setTimeout(() => req.destroy(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    function fail(e: unknown) {
      clearTimeout(timer);
      reject(new NotAnswered(e, connected));
    }
    req.on("error", fail);
    req.end(body);
  });
}

function parseEnvelope<D>(text: string): Envelope<D> | undefined {
  try {
    const v = JSON.parse(text) as Envelope<D>;
    return v && typeof v === "object" && ("data" in v || "error" in v) ? v : undefined;
  } catch {
    return undefined;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// The chaos run's own clients, in the runner's process: producers that submit (and
// sometimes cancel) tasks, and one plain-HTTP worker. Each records what the nodes
// confirmed — a 2xx answer — as the history the checker holds the database to: a
// confirmed write must never be lost. A request that fails without an answer, or with
// 503, is sent again with the same Idempotency-Key (and, for a completion, the same
// body), as the contract tells clients to.
import { outcomeOf, stateOf } from "./outcome.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface History {
  /** Confirmed submits: the key's number → the task's id. */
  readonly submitted: Map<number, string>;
  /** Tasks a confirmed cancel made CANCELLED. */
  readonly cancelled: Set<string>;
  /** Tasks a cancel was refused for (409 STATE_CONFLICT): that cancel must not have happened. */
  readonly cancelRefused: Set<string>;
  /** Tasks a confirmed completion of the plain worker ended: the state it answered and the attempt it ended. */
  readonly completed: Map<string, { readonly state: string; readonly attemptId: string }>;
  /** Attempts whose completion was refused (409 STATE_CONFLICT): they must not have ended by it. */
  readonly completionRefused: Set<string>;
  /** ACKs the nodes confirmed to the Inbox consumers: each delivery's id → the epochs of its receipts. */
  readonly acksConfirmed: Map<string, Set<string>>;
  /** Answers no client should ever get: 5xx other than 503, and 4xx the run did not provoke. */
  readonly wrongAnswers: string[];
  /** Requests sent again after a failure or a 503. */
  retries: number;
}

export function newHistory(): History {
  return {
    submitted: new Map(),
    cancelled: new Set(),
    cancelRefused: new Set(),
    completed: new Map(),
    completionRefused: new Set(),
    acksConfirmed: new Map(),
    wrongAnswers: [],
    retries: 0,
  };
}

interface Answer {
  readonly status: number;
  readonly json: any;
}

export class Traffic {
  private stopped = false;
  private readonly loops: Promise<void>[] = [];
  private nextIndex = 0;

  constructor(
    private readonly urls: readonly string[],
    private readonly token: string,
    private readonly queueId: string,
    private readonly seed: number,
    readonly history: History,
  ) {}

  /** `producers` loops each submitting `perSecond` tasks a second, and one plain-HTTP worker. */
  start(producers: number, perSecond: number): void {
    for (let p = 0; p < producers; p++) this.loops.push(this.produce(perSecond));
    this.loops.push(this.work());
  }

  /** No new task is submitted; requests under way finish (each keeps retrying until the nodes answer). */
  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.loops);
  }

  /** One request, sent again (same key, same body) until a node answers something other than 503. */
  private async call(method: string, path: string, body: unknown, key?: string): Promise<Answer> {
    for (let attempt = 0; ; attempt++) {
      const url = this.urls[(attempt + this.nextIndex++) % this.urls.length]!;
      try {
        const res = await fetch(url + path, {
          method,
          headers: {
            Authorization: `Bearer ${this.token}`,
            "Content-Type": "application/json",
            ...(key ? { "Idempotency-Key": key } : {}),
          },
          body: JSON.stringify(body),
          signal: AbortSignal.timeout(20_000),
        });
        const text = await res.text();
        if (res.status >= 500 && res.status !== 503)
          this.history.wrongAnswers.push(`${method} ${path}: ${res.status} ${text}`);
        if (res.status < 500) return { status: res.status, json: text ? JSON.parse(text) : undefined };
      } catch {
        // no answer: the node is down, frozen or cut off; the request may or may not have landed
      }
      this.history.retries++;
      await sleep(50 + Math.random() * 200);
    }
  }

  private async produce(perSecond: number): Promise<void> {
    while (!this.stopped) {
      const i = this.nextTask++;
      const key = `chaos-${this.seed}-task-${i}`;
      const submit = await this.call(
        "POST",
        "/v1/tasks",
        { queue_id: this.queueId, input: { i }, max_attempts: 100 },
        key,
      );
      if (submit.status !== 201 && submit.status !== 200) {
        this.history.wrongAnswers.push(`submit ${i}: ${submit.status} ${JSON.stringify(submit.json)}`);
        continue;
      }
      const task = submit.json.data.task as { id: string; revision: string };
      this.history.submitted.set(i, task.id);
      if (i % 10 === 7) await this.cancel(task);
      await sleep(1000 / perSecond);
    }
  }
  private nextTask = 0;

  /** A cancel right after the submit: it wins while the task is QUEUED or RUNNING, else 409. */
  private async cancel(task: { id: string; revision: string }): Promise<void> {
    const res = await this.call(
      "POST",
      `/v1/tasks/${task.id}:cancel`,
      { expected_revision: task.revision, reason: "chaos cancel" },
      `chaos-${this.seed}-cancel-${task.id}`,
    );
    if (res.status === 200) this.history.cancelled.add(task.id);
    else if (conflict(res)) this.history.cancelRefused.add(task.id);
    else this.history.wrongAnswers.push(`cancel ${task.id}: ${res.status} ${JSON.stringify(res.json)}`);
  }

  /** Claim one task, complete it as outcomeOf says; a completion refused with 409 lost its lease (the task is retried). */
  private async work(): Promise<void> {
    while (!this.stopped) {
      const claim = await this.call("POST", "/v1/worker/claim", { queue_id: this.queueId, wait_ms: 1000 });
      if (claim.status === 204) continue;
      if (claim.status !== 200) {
        this.history.wrongAnswers.push(`claim: ${claim.status} ${JSON.stringify(claim.json)}`);
        await sleep(500);
        continue;
      }
      const { attempt_id, task } = claim.json.data as { attempt_id: string; task: { id: string } };
      const done = await this.call(
        "POST",
        `/v1/worker/attempts/${attempt_id}:complete`,
        outcomeOf(task.id),
        `chaos-${this.seed}-complete-${attempt_id}`,
      );
      if (done.status === 200) {
        const state = done.json.data.task.state as string;
        if (state !== stateOf(task.id)) this.history.wrongAnswers.push(`complete ${task.id}: answered ${state}`);
        this.history.completed.set(task.id, { state, attemptId: attempt_id });
      } else if (conflict(done)) {
        this.history.completionRefused.add(attempt_id);
      } else {
        this.history.wrongAnswers.push(`complete ${task.id}: ${done.status} ${JSON.stringify(done.json)}`);
      }
    }
  }
}

/** The one refusal a retried cancel or completion may get: the task moved on (a lease lost, a task ended). */
function conflict(res: Answer): boolean {
  return res.status === 409 && res.json?.error?.code === "STATE_CONFLICT";
}

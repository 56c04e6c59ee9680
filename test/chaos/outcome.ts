// What a chaos task's worker answers, from the task's id alone (a claim carries no input):
// whichever worker runs it, and however often, a task completes the same way.
export type Outcome = { outcome: "succeeded"; result: { task: string } } | { outcome: "failed"; error: string };

export function outcomeOf(taskId: string): Outcome {
  return parseInt(taskId.slice(-1), 16) % 5 === 3
    ? { outcome: "failed", error: "this task fails" }
    : { outcome: "succeeded", result: { task: taskId } };
}

/** The task state that outcome leaves. */
export function stateOf(taskId: string): "SUCCEEDED" | "FAILED" {
  return outcomeOf(taskId).outcome === "succeeded" ? "SUCCEEDED" : "FAILED";
}

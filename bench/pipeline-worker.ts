// The pipeline's workers as the SDK runs them, in a process of their own (bench/pipeline.ts
// forks one for orbit.pipeline): one `Worker` with 16 tasks in flight, claiming in batches
// of its free slots and completing in batches, each task completed with a small result. In
// its own process its CPU is its own line in the figures, as a worker fleet's would be.
//
// IPC: argv = [baseUrl, token, queueId, concurrency, waitMs]. Takes {type: "start"}: starts a
// Worker and answers {type: "started"}. Takes {type: "stop"}: stops it (what it claimed is
// completed first) and answers {type: "stopped", completed, refused}. Takes {type: "exit"}.
import { Worker } from "../src/sdk/index.js";

export type PipelineWorkerCommand = { type: "start" } | { type: "stop" } | { type: "exit" };
export type PipelineWorkerMessage =
  { type: "started" } | { type: "stopped"; completed: number; refused: number } | { type: "failed"; message: string };

const [baseUrl, token, queueId, concurrency, waitMs] = process.argv.slice(2) as [
  string,
  string,
  string,
  string,
  string,
];
const send = (m: PipelineWorkerMessage) => process.send!(m);

let worker: Worker | undefined;
let completed = 0;
let refused = 0;

process.on("message", (m: PipelineWorkerCommand) => {
  if (m.type === "start") {
    completed = 0;
    refused = 0;
    worker = new Worker({
      baseUrl,
      token,
      queueId,
      concurrency: Number(concurrency),
      waitMs: Number(waitMs),
      handler: async () => {
        completed++;
        return { outcome: "succeeded", result: { ok: true } };
      },
      onRefused: () => void refused++,
      onError: (e) => process.stderr.write(`bench pipeline worker: ${(e as Error).message}\n`),
    }).start();
    // A worker that ends on its own (a claim refused for good) fails the round.
    void worker.done.then((r) => {
      if (!r.stopped) send({ type: "failed", message: r.error.message });
    });
    send({ type: "started" });
  }
  if (m.type === "stop") {
    const w = worker;
    worker = undefined;
    void (w?.stop({ deadlineMs: 10_000 }) ?? Promise.resolve()).then(() =>
      send({ type: "stopped", completed, refused }),
    );
  }
  if (m.type === "exit") process.disconnect();
});

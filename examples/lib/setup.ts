// What every example needs: where Orbit runs and a credential. With ORBIT_TOKEN and
// ORBIT_QUEUE_ID set the examples use those; otherwise they create their own namespace,
// application, queue and credential with `orbit bootstrap` (through ORBIT_DATABASE_URL),
// so that each example runs with one command next to a running `orbit serve`.
import { execFileSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { OrbitClient } from "@orbit-events/sdk";

export interface ExampleSetup {
  readonly baseUrl: string;
  readonly token: string;
  readonly queueId: string;
  readonly client: OrbitClient;
}

const ORBIT_BIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../src/cli/main.js");

export function setup(example: string): ExampleSetup {
  const baseUrl = process.env.ORBIT_URL ?? "http://127.0.0.1:8080";
  let token = process.env.ORBIT_TOKEN;
  let queueId = process.env.ORBIT_QUEUE_ID;
  if (!token || !queueId) {
    const out = JSON.parse(
      execFileSync(
        process.execPath,
        [
          ORBIT_BIN,
          "bootstrap",
          "--namespace",
          "examples",
          "--application",
          example,
          "--queue",
          example,
          "--event-access",
          "--json",
        ],
        {
          encoding: "utf8",
        },
      ),
    ) as { token: string; queues: { id: string }[] };
    token = out.token;
    queueId = out.queues[0]!.id;
  }
  return { baseUrl, token, queueId, client: new OrbitClient({ baseUrl, token }) };
}

/** Produces n task results on the queue, as workers would: submit, claim, complete. */
export async function produce(client: OrbitClient, queueId: string, n: number, prefix = "example"): Promise<void> {
  for (let i = 0; i < n; i++) {
    await client.submitTask(`${prefix}-${Date.now()}-${i}-${Math.random()}`, { queue_id: queueId, input: { n: i } });
    const claimed = await client.claimTask({ queue_id: queueId, wait_ms: 1000 });
    if (!claimed) throw new Error("no task to claim");
    await client.completeAttempt(claimed.attempt_id, {
      outcome: i % 7 === 3 ? "failed" : "succeeded",
      result: { n: i },
    });
  }
}

export const say = (line: string): void => void process.stdout.write(`${line}\n`);

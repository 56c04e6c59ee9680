// A CPU profile of a node for one timed phase only (ORBIT_BENCH_PROFILE_DIR): `--cpu-prof`
// profiles a whole process, setup included (the append's setup submits and claims 8,000
// tasks, more work than the timed completions), so the phase's own costs drown. Nodes are
// started with an inspector on a loopback port; the phase starts and stops the V8
// profiler through it (Chrome DevTools Protocol: Profiler.start / Profiler.stop).
import { mkdirSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import path from "node:path";
import WebSocket from "ws";

export const PROFILE_DIR = process.env.ORBIT_BENCH_PROFILE_DIR;

/** Inspector ports of the nodes started for profiling, by pid. */
const inspectors = new Map<number, number>();
let written = 0;

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export function registerInspector(pid: number, port: number): void {
  inspectors.set(pid, port);
}

class Inspector {
  private next = 1;
  private readonly waiting = new Map<number, (result: any) => void>();
  private constructor(private readonly ws: WebSocket) {
    ws.on("message", (data) => {
      const m = JSON.parse(String(data)) as { id?: number; result?: unknown };
      if (m.id !== undefined) this.waiting.get(m.id)?.(m.result);
    });
  }

  static async open(port: number): Promise<Inspector> {
    const [target] = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as {
      webSocketDebuggerUrl: string;
    }[];
    const ws = new WebSocket(target!.webSocketDebuggerUrl);
    await new Promise((resolve, reject) => ws.once("open", resolve).once("error", reject));
    return new Inspector(ws);
  }

  call(method: string, params: object = {}): Promise<any> {
    const id = this.next++;
    return new Promise((resolve) => {
      this.waiting.set(id, resolve);
      this.ws.send(JSON.stringify({ id, method, params }));
    });
  }

  close(): void {
    this.ws.close();
  }
}

/** Profiles each given process that has an inspector while fn runs; one file per process. */
export async function withProfile<T>(
  pids: Record<string, number | undefined>,
  label: string,
  fn: () => Promise<T>,
): Promise<T> {
  const targets = Object.entries(pids).filter(([, pid]) => pid !== undefined && inspectors.has(pid));
  if (!PROFILE_DIR || targets.length === 0) return fn();
  const open = await Promise.all(
    targets.map(async ([key, pid]) => ({ key, pid: pid!, inspector: await Inspector.open(inspectors.get(pid!)!) })),
  );
  await Promise.all(
    open.map(
      async ({ inspector }) => (await inspector.call("Profiler.enable"), await inspector.call("Profiler.start")),
    ),
  );
  try {
    return await fn();
  } finally {
    // Every inspector is closed whatever happens to a profile: a node still attached to
    // one does not exit when stopped ("Waiting for the debugger to disconnect"), and the
    // run would hang on it (say, when the directory is missing).
    mkdirSync(PROFILE_DIR, { recursive: true });
    for (const { key, pid, inspector } of open) {
      try {
        const { profile } = await inspector.call("Profiler.stop");
        const file = path.join(PROFILE_DIR, `${String(++written).padStart(2, "0")}-${label}-${key}-${pid}.cpuprofile`);
        writeFileSync(file, JSON.stringify(profile));
        process.stderr.write(`bench: profile ${file}\n`);
      } finally {
        inspector.close();
      }
    }
  }
}

// Real `orbit` processes: the CLI and `orbit serve` nodes on port 0, spawned from the
// compiled package exactly as an operator would run them.
import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import { createInterface } from "node:readline";

export const ORBIT_BIN = path.resolve(process.cwd(), "dist/src/cli/main.js");

export interface CliResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** `bin`: another build of the `orbit` command, e.g. one installed from the package. */
export function runCli(args: string[], env: Record<string, string> = {}, bin = ORBIT_BIN): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [bin, ...args], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

export interface BootstrapOutput {
  namespace_id: string;
  application_id: string;
  credential_id: string;
  token: string;
  actions: string[];
  queues: { id: string; name: string }[];
}

export async function bootstrap(
  databaseUrl: string,
  o: { namespace: string; application: string; queues: string[]; eventAccess?: boolean },
  bin = ORBIT_BIN,
): Promise<BootstrapOutput> {
  const args = ["bootstrap", "--namespace", o.namespace, "--application", o.application, "--json"];
  for (const q of o.queues) args.push("--queue", q);
  if (o.eventAccess) args.push("--event-access");
  const res = await runCli(args, { ORBIT_DATABASE_URL: databaseUrl }, bin);
  if (res.code !== 0) throw new Error(`bootstrap failed (${res.code}): ${res.stderr}`);
  return JSON.parse(res.stdout) as BootstrapOutput;
}

export interface OrbitNode {
  readonly url: string;
  readonly port: number;
  /** The metrics listener's port (ORBIT_METRICS_PORT set), from the `listening` line. */
  readonly metricsPort: number | undefined;
  readonly process: ChildProcess;
  /** Every line the node wrote to stdout and stderr so far. */
  readonly lines: string[];
  /** Sends a signal and waits for the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export async function startNode(
  databaseUrl: string,
  env: Record<string, string> = {},
  args: string[] = [],
  bin = ORBIT_BIN,
): Promise<OrbitNode> {
  const child = spawn(process.execPath, [bin, "serve", ...args], {
    env: { ...process.env, ORBIT_DATABASE_URL: databaseUrl, ORBIT_PORT: "0", ORBIT_HOST: "127.0.0.1", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: string[] = [];
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  createInterface({ input: child.stderr! }).on("line", (l) => lines.push(l));
  let metricsPort: number | undefined;
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`orbit serve did not start:\n${lines.join("\n")}`)), 20000);
    createInterface({ input: child.stdout! }).on("line", (l) => {
      lines.push(l);
      try {
        const o = JSON.parse(l) as { msg?: string; port?: number; metrics_port?: number };
        if (o.msg === "listening" && typeof o.port === "number") {
          clearTimeout(timer);
          metricsPort = o.metrics_port;
          resolve(o.port);
        }
      } catch {
        /* not a log line */
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`orbit serve exited with ${code}:\n${lines.join("\n")}`));
    });
  });
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    metricsPort,
    process: child,
    lines,
    async stop(signal: NodeJS.Signals = "SIGTERM") {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill(signal);
      return exited;
    },
  };
}

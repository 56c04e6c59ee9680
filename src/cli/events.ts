import { loadConfig } from "../config/index.js";
import { createPool } from "../db/pool.js";
import { selectNamespaceId } from "../db/queries/identity.js";
import { readEvents, readStream } from "../domain/result-log.js";
import { parseUint64 } from "../wire/uint64.js";
import { parse, str, UsageError } from "./args.js";

const HELP = `Usage: orbit events --namespace NAME [--after SEQUENCE] [--limit N]

Prints the namespace's committed result events with a sequence above SEQUENCE (default
0), oldest first, one JSON object per line in the event shape of docs/protocol.md §6
(task.requeued events included; subscriptions never deliver those). At most N lines
(default 100, at most 10000). An operator's view of the log, read-only.
`;

export async function runEvents(argv: string[]): Promise<number> {
  const v = parse(argv, { namespace: { type: "string" }, after: { type: "string" }, limit: { type: "string" } }, HELP);
  if (!v) return 0;
  const namespace = str(v, "namespace");
  if (!namespace) throw new UsageError(`--namespace is required\n\n${HELP}`);
  const after = str(v, "after") ?? "0";
  const limitText = str(v, "limit") ?? "100";
  try {
    parseUint64(after, "--after");
  } catch {
    throw new UsageError("--after must be a canonical decimal sequence");
  }
  if (!/^[1-9][0-9]{0,4}$/.test(limitText) || Number(limitText) > 10000)
    throw new UsageError("--limit must be 1-10000");
  const pool = createPool(loadConfig().databaseUrl, 1);
  try {
    const id = await selectNamespaceId(pool, namespace);
    if (!id) throw new UsageError(`no namespace named ${JSON.stringify(namespace.slice(0, 128))}`);
    const { head, retentionBoundary } = await readStream(pool, id);
    for (const e of await readEvents(pool, id, after, Number(limitText)))
      process.stdout.write(JSON.stringify(e) + "\n");
    process.stderr.write(`head ${head}, retained after ${retentionBoundary}\n`);
    return 0;
  } finally {
    await pool.end();
  }
}

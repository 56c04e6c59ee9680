import { loadConfig } from "../config/index.js";
import { createPool } from "../db/pool.js";
import { selectNamespaceId } from "../db/queries/identity.js";
import { PurgeError, purge } from "../domain/result-log.js";
import { parseUint64 } from "../wire/uint64.js";
import { parse, str, UsageError } from "./args.js";

const HELP = `Usage: orbit purge --namespace NAME --before SEQUENCE

Deletes the namespace's result events with a sequence below SEQUENCE and raises its
retention boundary to SEQUENCE - 1, durably: the retained log then starts at SEQUENCE.
SEQUENCE is a canonical decimal, at most the committed head + 1. A subscription whose
unmaterialised history is purged gets EVENT_HISTORY_EXPIRED; it never skips ahead.
Age-based retention: set ORBIT_RETENTION (e.g. 30d) on the nodes instead.
`;

export async function runPurge(argv: string[]): Promise<number> {
  const v = parse(argv, { namespace: { type: "string" }, before: { type: "string" } }, HELP);
  if (!v) return 0;
  const namespace = str(v, "namespace");
  const beforeText = str(v, "before");
  if (!namespace || !beforeText) throw new UsageError(`--namespace and --before are required\n\n${HELP}`);
  let before: bigint;
  try {
    before = parseUint64(beforeText, "--before");
  } catch {
    throw new UsageError("--before must be a canonical decimal sequence (no sign, no leading zero)");
  }
  const pool = createPool(loadConfig().databaseUrl, 2);
  try {
    const id = await selectNamespaceId(pool, namespace);
    if (!id) throw new UsageError(`no namespace named ${JSON.stringify(namespace.slice(0, 128))}`);
    try {
      const out = await purge(pool, id, before);
      process.stdout.write(
        `purged ${out.deleted} events; the retained log of ${namespace} starts after ${out.boundary}\n`,
      );
    } catch (e) {
      if (e instanceof PurgeError) throw new UsageError(e.message);
      throw e;
    }
    return 0;
  } finally {
    await pool.end();
  }
}

import { loadConfig } from "../config/index.js";
import { createPool } from "../db/pool.js";
import { migrate } from "../db/migrate.js";
import { bootstrap, validateBootstrapInput } from "../domain/bootstrap.js";
import { flag, list, parse, str, UsageError } from "./args.js";

const HELP = `Usage: orbit bootstrap --namespace NAME --application NAME --queue NAME [--queue NAME...]
                       [--event-access] [--json]

Creates whatever of the namespace, the application and the queues does not exist yet
(by name), and a NEW credential scoped to the named queues; prints its token once (only
a digest is stored). The credential gets the task actions (tasks:submit, tasks:read,
tasks:cancel, tasks:work, tasks:review); with --event-access also events:manage,
events:read and events:consume. Applies pending migrations first.

  --json   print one JSON object: {namespace_id, application_id, credential_id, token,
           actions, queues: [{id, name}]}
`;

export async function runBootstrap(argv: string[]): Promise<number> {
  const v = parse(
    argv,
    {
      namespace: { type: "string" },
      application: { type: "string" },
      queue: { type: "string", multiple: true },
      "event-access": { type: "boolean" },
      json: { type: "boolean" },
    },
    HELP,
  );
  if (!v) return 0;
  const namespace = str(v, "namespace");
  const application = str(v, "application");
  const queues = list(v, "queue");
  if (!namespace || !application || queues.length === 0) {
    throw new UsageError(`--namespace, --application and at least one --queue are required\n\n${HELP}`);
  }
  const input = { namespace, application, queues, eventAccess: flag(v, "event-access") };
  const problem = validateBootstrapInput(input);
  if (problem) throw new UsageError(problem);
  const config = loadConfig();
  await migrate(config.databaseUrl);
  const pool = createPool(config.databaseUrl, 1);
  try {
    const out = await bootstrap(pool, input);
    if (flag(v, "json")) {
      process.stdout.write(JSON.stringify(out) + "\n");
    } else {
      process.stdout.write(
        [
          `namespace    ${namespace}  ${out.namespace_id}`,
          `application  ${application}  ${out.application_id}`,
          ...out.queues.map((q) => `queue        ${q.name}  ${q.id}`),
          `credential   ${out.credential_id}`,
          `actions      ${out.actions.join(" ")}`,
          `token        ${out.token}`,
          "",
          "The token is shown only this once; keep it secret.",
          "",
        ].join("\n"),
      );
    }
    return 0;
  } finally {
    await pool.end();
  }
}

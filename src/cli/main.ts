#!/usr/bin/env node
// The `orbit` command: migrate | bootstrap | serve | credential | revoke | purge | events |
// listen. Only this file touches process.argv, process.exit and the environment.
import { runBootstrap } from "./bootstrap.js";
import { runMigrate } from "./migrate.js";
import { runRevoke } from "./revoke.js";
import { runServe } from "./serve.js";
import { runPurge } from "./purge.js";
import { runEvents } from "./events.js";
import { runListen } from "./listen.js";
import { runCredential } from "./credential.js";
import { UsageError } from "./args.js";

const USAGE = `orbit: reliable task-result subscriptions

Usage: orbit <command> [options]

Commands:
  migrate     apply the numbered SQL migrations (safe to run from several nodes at once)
  bootstrap   create a namespace, application, queues and a new credential; print its token
  serve       run a node: HTTP API and WebSocket event delivery
  credential  credential revoke ID: its token authenticates nothing from then on
  revoke      the same, as revoke --credential ID
  purge       delete old result events and raise the namespace's retention boundary
  events      print a namespace's committed result events as JSON lines
  listen      consume a subscription in the terminal: one JSON line per event

Run "orbit <command> --help" for a command's options. Configuration comes from the
environment (ORBIT_DATABASE_URL, ORBIT_HOST, ORBIT_PORT, ...; see docs/configuration.md).
`;

const COMMANDS: Record<string, (argv: string[]) => Promise<number>> = {
  migrate: runMigrate,
  bootstrap: runBootstrap,
  serve: runServe,
  revoke: runRevoke,
  purge: runPurge,
  events: runEvents,
  listen: runListen,
  credential: runCredential,
};

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === "--help" || command === "-h" || command === "help") {
    process.stdout.write(USAGE);
    return command === undefined ? 2 : 0;
  }
  const run = COMMANDS[command];
  if (!run) {
    process.stderr.write(`orbit: unknown command "${command}"\n\n${USAGE}`);
    return 2;
  }
  try {
    return await run(rest);
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`orbit ${command}: ${e.message}\n`);
      return 2;
    }
    // Messages of our own errors are safe to print; driver errors print their code only.
    const code = (e as { code?: unknown })?.code;
    const msg = e instanceof Error && code === undefined ? e.message : `database error ${String(code)}`;
    process.stderr.write(`orbit ${command}: ${msg}\n`);
    return 1;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  () => {
    process.exitCode = 1;
  },
);

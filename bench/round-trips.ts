// Preloaded into a benchmark node (`node --import`, startNode's countRoundTrips): counts the
// commands the node's mysql2 connections send to the database. Each command is one request
// and its answer, so the count is the node's round trips to MariaDB; its statements and
// commits are MariaDB's own counters (SHOW GLOBAL STATUS), but a multi-statement query —
// Orbit's pipelined transactions — is many statements in one round trip, which no server
// counter shows. The node prints the count as one JSON line on stdout when it gets SIGUSR2.
import { createRequire } from "node:module";
import { ROUND_TRIPS_KEY } from "./common.js";

const require = createRequire(import.meta.url);
// The same module instance the node's `mysql2/promise` loads (one CommonJS cache per process).
const { Connection } = require("mysql2") as { Connection: { prototype: { addCommand(cmd: object): unknown } } };
const addCommand = Connection.prototype.addCommand;
let commands = 0;
Connection.prototype.addCommand = function (this: unknown, cmd: object) {
  // The handshake of a new connection is not a request of the node's work.
  if (cmd.constructor.name !== "ClientHandshake") commands++;
  return addCommand.call(this, cmd);
};
process.on("SIGUSR2", () => process.stdout.write(`${JSON.stringify({ [ROUND_TRIPS_KEY]: commands })}\n`));

import { loadConfig } from "../config/index.js";
import { migrate } from "../db/migrate.js";
import { parse } from "./args.js";

const HELP = `Usage: orbit migrate

Applies the numbered SQL files in migrations/ once each, in order, to the database of
ORBIT_DATABASE_URL (created if missing), recording each in schema_migrations. Safe to
run concurrently from several nodes: a database lock serialises them. Refuses a
database that is newer than this code.
`;

export async function runMigrate(argv: string[]): Promise<number> {
  if (!parse(argv, {}, HELP)) return 0;
  const res = await migrate(loadConfig().databaseUrl);
  // Recovered: found in effect after a crash between their DDL and their ledger row.
  const recovered = res.recovered.length > 0 ? `, recorded ${res.recovered.length} already in effect` : "";
  process.stdout.write(`migrated: applied ${res.applied.length}${recovered}, now at ${res.current}\n`);
  return 0;
}

import { loadConfig } from "../config/index.js";
import { createPool } from "../db/pool.js";
import { revokeCredential } from "../db/queries/identity.js";
import { parse, str, UsageError } from "./args.js";

const HELP = `Usage: orbit revoke --credential ID

Revokes a credential: from then on its token gets 401 UNAUTHENTICATED everywhere. The
credential's subscriptions, deliveries and audit records are kept.
`;

export async function runRevoke(argv: string[]): Promise<number> {
  const v = parse(argv, { credential: { type: "string" } }, HELP);
  if (!v) return 0;
  const credential = str(v, "credential");
  if (!credential || !/^[0-9a-f]{32}$/.test(credential))
    throw new UsageError(`--credential must be a 32-hex id\n\n${HELP}`);
  const pool = createPool(loadConfig().databaseUrl, 1);
  try {
    const done = await revokeCredential(pool, credential);
    process.stdout.write(done ? `revoked ${credential}\n` : `no active credential ${credential}\n`);
    return done ? 0 : 1;
  } finally {
    await pool.end();
  }
}

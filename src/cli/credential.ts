import { runRevoke } from "./revoke.js";
import { UsageError } from "./args.js";

const HELP = `Usage: orbit credential revoke ID

Revokes the credential ID: from then on its token gets 401 UNAUTHENTICATED on every
request, and open event connections using it are closed with UNAUTHENTICATED at their
next ping, ACK or claim. Its subscriptions, deliveries and audit records are kept.
(The same as "orbit revoke --credential ID".)
`;

export async function runCredential(argv: string[]): Promise<number> {
  const [sub, id, ...rest] = argv;
  if (sub === "--help" || sub === "-h" || (sub === "revoke" && (id === "--help" || id === "-h"))) {
    process.stdout.write(HELP);
    return 0;
  }
  if (sub !== "revoke" || id === undefined || rest.length > 0)
    throw new UsageError(`expected "credential revoke ID"\n\n${HELP}`);
  // Checked here, so that the message and the usage are this form's, not revoke --credential's.
  // The argument is not echoed: it may be a token pasted by mistake.
  if (!/^[0-9a-f]{32}$/.test(id))
    throw new UsageError(`ID must be a credential id: 32 lowercase hex characters\n\n${HELP}`);
  return runRevoke(["--credential", id]);
}

import { requireSafeTransport } from "../sdk/transport.js";
import { loadConfig } from "../config/index.js";
import { Consumer } from "../sdk/consumer.js";
import { parse, flag, str, UsageError } from "./args.js";

const HELP = `Usage: orbit listen --subscription ID [--capacity N] [--no-ack]

A live consumer in the terminal: prints each delivered event as one JSON line on stdout
(and a short line on stderr), then ACKs it, unless --no-ack (a read-only tail: the
deliveries come back when their leases run out). Reconnects by itself; stops on
EVENT_HISTORY_EXPIRED, PERMISSION_DENIED, NOT_FOUND or UNAUTHENTICATED. Ctrl-C drains and
exits 0. When stdout is closed (e.g. piped into head) it drains and exits 1; a line it
could not print is not ACKed.

Environment: ORBIT_TOKEN (required: a credential with events:consume; never put it on
the command line), ORBIT_URL (an http:// or https:// base URL, default
http://ORBIT_HOST:ORBIT_PORT, i.e. http://127.0.0.1:8080). A malformed one of either
exits 2 at once.

  --capacity N   deliveries held at once, 1-32 (default 8)
`;

export async function runListen(argv: string[]): Promise<number> {
  const v = parse(
    argv,
    { subscription: { type: "string" }, capacity: { type: "string" }, "no-ack": { type: "boolean" } },
    HELP,
  );
  if (!v) return 0;
  const subscriptionId = str(v, "subscription");
  if (!subscriptionId || !/^[0-9a-f]{32}$/.test(subscriptionId))
    throw new UsageError(`--subscription must be a 32-hex id\n\n${HELP}`);
  const capacityText = str(v, "capacity") ?? "8";
  if (!/^[1-9][0-9]?$/.test(capacityText) || Number(capacityText) > 32) throw new UsageError("--capacity must be 1-32");
  const token = process.env.ORBIT_TOKEN;
  if (!token) throw new UsageError("set ORBIT_TOKEN to a token with events:consume");
  // A token travels in a header: anything but visible ASCII could never be sent. Neither
  // it nor the URL can get better by retrying, which the consumer would do for ever.
  if (!/^[\x21-\x7e]+$/.test(token))
    throw new UsageError("ORBIT_TOKEN must be printable ASCII without spaces, as tokens are");
  const config = loadConfig();
  const baseUrl = process.env.ORBIT_URL || `http://${config.host}:${config.port}`;
  if (!isBaseUrl(baseUrl)) {
    throw new UsageError("ORBIT_URL must be an http:// or https:// URL without credentials, query or fragment");
  }
  try {
    requireSafeTransport(baseUrl, false);
  } catch (e) {
    throw new UsageError(`ORBIT_URL: ${(e as Error).message.replace(/, or set allowInsecure: true$/, "")}`);
  }
  const consumer = new Consumer({
    baseUrl,
    token,
    subscriptionId,
    capacity: Number(capacityText),
    ack: !flag(v, "no-ack"),
    onError: (e) => process.stderr.write(`orbit listen: ${e instanceof Error ? e.message : String(e)}\n`),
    handler: async (event, delivery) => {
      // Printed before the ACK: stdout is this consumer's durable store, so a line that
      // could not be written fails the handler and is not ACKed.
      await new Promise<void>((resolve, reject) =>
        process.stdout.write(JSON.stringify(event) + "\n", (e) => (e ? reject(e) : resolve())),
      );
      process.stderr.write(
        `#${event.sequence} ${event.type} task ${event.aggregate_id} (delivery ${delivery.id}, attempt ${delivery.attempts})\n`,
      );
    },
  }).start();
  const onSignal = () => void consumer.stop({ deadlineMs: 5000 });
  // The reader went away (`orbit listen | head`): stop like on a signal, not with an
  // unhandled 'error' event.
  let stdoutError: Error | undefined;
  process.stdout.on("error", (e) => {
    stdoutError ??= e;
    onSignal();
  });
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  const end = await consumer.done;
  if (stdoutError) {
    process.stderr.write(`orbit listen: stopped: stdout closed (${stdoutError.message})\n`);
    return 1;
  }
  if (end.stopped) return 0;
  process.stderr.write(`orbit listen: stopped: ${end.error.message}\n`);
  return 1;
}

function isBaseUrl(text: string): boolean {
  let u: URL;
  try {
    u = new URL(text);
  } catch {
    return false;
  }
  return (
    (u.protocol === "http:" || u.protocol === "https:") &&
    !u.username &&
    !u.password &&
    !u.search &&
    !u.hash &&
    !text.includes("?") &&
    !text.includes("#")
  );
}

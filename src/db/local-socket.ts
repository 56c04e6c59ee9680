// The faster path to a database on the same host: its Unix socket instead of loopback TCP.
// On a small machine a round trip to MariaDB costs CPU on both sides, and a socket write
// costs less than a TCP one (bench/README.md). The socket is taken only when it is surely
// the server the URL names, and that server listens on the URL's port: a proxy or a
// tunnel on another port stays in the path.
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import mysql from "mysql2/promise";

/** Where Debian, most distributions and the MySQL defaults put the server's socket. */
const USUAL_SOCKETS = ["/run/mysqld/mysqld.sock", "/var/run/mysqld/mysqld.sock", "/tmp/mysql.sock"];
const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]"]);
const PROBE_TIMEOUT_MS = 2000;

export type LocalSocketMode = "auto" | "off";

/** The database URL the pools use, and why: `socket` is set when the Unix socket is taken. */
export interface DatabasePath {
  readonly url: string;
  readonly socket?: string;
  /** Why the URL stays as given, when a socket was looked for and not taken. */
  readonly tcpBecause?: string;
}

/**
 * `url` with `socketPath` set to a usual Unix socket when its host is loopback, it names
 * no socket of its own, and the socket leads to the very server the URL does: the server
 * behind it takes the URL's user and password, listens on the URL's port, and sees the
 * lock a TCP connection of the URL holds. Otherwise `url` as given.
 */
export async function localPath(
  url: string,
  mode: LocalSocketMode,
  sockets: readonly string[] = USUAL_SOCKETS,
): Promise<DatabasePath> {
  const u = new URL(url);
  if (mode === "off" || !LOOPBACK.has(u.hostname) || u.searchParams.has("socketPath")) return { url };
  const present = sockets.filter((s) => existsSync(s));
  if (present.length === 0) return { url, tcpBecause: "no Unix socket at the usual paths" };
  // The server, not the database: it may not exist yet.
  const server = new URL(url);
  server.pathname = "/";
  const lock = `orbit_socket_probe_${randomBytes(8).toString("hex")}`;
  let tcp: mysql.Connection | undefined;
  try {
    tcp = await mysql.createConnection({ uri: server.toString(), connectTimeout: PROBE_TIMEOUT_MS });
    const [[held]] = await tcp.query<mysql.RowDataPacket[]>({
      sql: "SELECT CONNECTION_ID() AS id, CURRENT_USER() AS account, GET_LOCK(?, 0) AS got",
      values: [lock],
      timeout: PROBE_TIMEOUT_MS,
    });
    const reasons: string[] = [];
    for (const socket of present) {
      const reason = await sameServer(server, socket, u, lock, held!);
      if (reason === undefined) {
        const via = new URL(url);
        via.searchParams.set("socketPath", socket);
        return { url: via.toString(), socket };
      }
      reasons.push(`${socket}: ${reason}`);
    }
    return { url, tcpBecause: reasons.join("; ") };
  } catch (e) {
    // The message names the user and host at most; never the password.
    return { url, tcpBecause: `TCP: ${codeOf(e)}` };
  } finally {
    tcp?.destroy();
  }
}

/** Why the server behind `socket` is not the one `held` was read from; undefined when it is. */
async function sameServer(
  server: URL,
  socket: string,
  u: URL,
  lock: string,
  held: mysql.RowDataPacket,
): Promise<string | undefined> {
  const via = new URL(server);
  via.searchParams.set("socketPath", socket);
  let conn: mysql.Connection | undefined;
  try {
    conn = await mysql.createConnection({ uri: via.toString(), connectTimeout: PROBE_TIMEOUT_MS });
    const [[seen]] = await conn.query<mysql.RowDataPacket[]>({
      sql: "SELECT @@port AS port, IS_USED_LOCK(?) AS holder, CURRENT_USER() AS account",
      values: [lock],
      timeout: PROBE_TIMEOUT_MS,
    });
    const port = Number(u.port || 3306);
    if (Number(seen!.port) !== port) return `a server on port ${String(seen!.port)}`;
    if (String(seen!.holder) !== String(held.id)) return "another server than the URL's";
    // The user, not the host part: `root@localhost` over the socket and `root@127.0.0.1` over
    // TCP are one user to an operator, who gave both the URL's password.
    if (userOf(seen!.account) !== userOf(held.account)) return "another user than over TCP";
    return undefined;
  } catch (e) {
    return codeOf(e);
  } finally {
    conn?.destroy();
  }
}

const userOf = (account: unknown) => String(account).replace(/@[^@]*$/, "");

function codeOf(e: unknown): string {
  return (e as { code?: string }).code ?? "refused";
}

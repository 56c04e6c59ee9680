// The faster path to a database on the same host: its Unix socket instead of loopback TCP.
// On a small machine a round trip to MariaDB costs CPU on both sides, and a socket write
// costs less than a TCP one (bench/README.md). The socket is taken only when it is surely
// the server the URL names: same credentials, and the server behind it listens on the
// URL's port. A proxy or a tunnel on another port stays in the path.
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
 * no socket of its own, and the server behind the socket accepts the URL's credentials and
 * says it listens on the URL's port. Otherwise `url` as given.
 */
export async function localPath(
  url: string,
  mode: LocalSocketMode,
  sockets: readonly string[] = USUAL_SOCKETS,
): Promise<DatabasePath> {
  const u = new URL(url);
  if (mode === "off" || !LOOPBACK.has(u.hostname) || u.searchParams.has("socketPath")) return { url };
  const port = Number(u.port || 3306);
  const reasons: string[] = [];
  for (const socket of sockets) {
    if (!existsSync(socket)) continue;
    const via = new URL(url);
    via.searchParams.set("socketPath", socket);
    // The server, not the database: it may not exist yet.
    const server = new URL(via);
    server.pathname = "/";
    let conn: mysql.Connection | undefined;
    try {
      conn = await mysql.createConnection({ uri: server.toString(), connectTimeout: PROBE_TIMEOUT_MS });
      const [rows] = await conn.query<mysql.RowDataPacket[]>("SELECT @@port AS port");
      if (Number(rows[0]?.port) === port) return { url: via.toString(), socket };
      reasons.push(`${socket} is a server on port ${String(rows[0]?.port)}`);
    } catch (e) {
      // The message names the user and host at most; never the password.
      reasons.push(`${socket}: ${(e as { code?: string }).code ?? "refused"}`);
    } finally {
      await conn?.end().catch(() => undefined);
    }
  }
  return { url, tcpBecause: reasons.length > 0 ? reasons.join("; ") : "no Unix socket at the usual paths" };
}

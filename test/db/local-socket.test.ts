// The database's Unix socket as the node's default path to a database on its own host
// (db/local-socket.ts): taken only when the server behind it is the one the URL names,
// never in place of a proxy on another port, never with a password in what it reports.
import { strict as assert } from "node:assert";
import { MYSQL_PORT, MYSQL_SERVER, freshDatabase, type TestDatabase } from "../helpers/db.js";
import { startProxy, type Proxy } from "../helpers/proxy.js";
import { startNode, type OrbitNode } from "../helpers/orbit.js";
import { client } from "../helpers/api.js";
import { localPath } from "../../src/db/local-socket.js";
import mysql from "mysql2/promise";

describe("the database's Unix socket", () => {
  let db: TestDatabase;
  let socket: string;
  let proxy: Proxy | undefined;
  let node: OrbitNode | undefined;

  before(async () => {
    db = await freshDatabase("local_socket");
    const admin = await mysql.createConnection({ uri: MYSQL_SERVER });
    try {
      await admin.query(`CREATE DATABASE \`${db.name}\``);
      socket = (await admin.query<mysql.RowDataPacket[]>("SELECT @@socket AS s"))[0][0]!.s as string;
    } finally {
      await admin.end();
    }
  });
  after(async () => {
    await node?.stop();
    await proxy?.close();
    await db?.drop();
  });

  /** How the server sees a connection made with `url`: "localhost" over the socket, "127.0.0.1:port" over TCP. */
  async function seenAs(url: string): Promise<string> {
    const c = await mysql.createConnection({ uri: url });
    try {
      const [rows] = await c.query<mysql.RowDataPacket[]>(
        "SELECT HOST AS host FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()",
      );
      return rows[0]!.host as string;
    } finally {
      await c.end();
    }
  }

  it("takes the socket for a loopback URL when the server behind it listens on the URL's port", async () => {
    const p = await localPath(db.url, "auto", ["/nonexistent/mysqld.sock", socket]);
    assert.equal(p.socket, socket);
    assert.equal(await seenAs(p.url), "localhost");
    assert.equal(new URL(p.url).pathname, `/${db.name}`, "the database stays the URL's");
  });

  it("keeps TCP through a proxy on another port: the socket's server is not the one the URL names", async () => {
    proxy = await startProxy(MYSQL_PORT);
    const url = db.urlVia(proxy);
    const p = await localPath(url, "auto", [socket]);
    assert.equal(p.url, url);
    assert.equal(p.socket, undefined);
    assert.match(p.tcpBecause ?? "", new RegExp(`server on port ${MYSQL_PORT}`));
  });

  it("keeps the URL as given when off, for a host that is not loopback, or with a socketPath of its own", async () => {
    for (const [url, mode] of [
      [db.url, "off"],
      ["mysql://root@db.example.invalid:3306/orbit", "auto"],
      [`${db.url}?socketPath=${encodeURIComponent(socket)}`, "auto"],
    ] as const) {
      assert.deepEqual(await localPath(url, mode, [socket]), { url });
    }
  });

  it("keeps TCP when the URL's credentials are refused, and never reports the password", async () => {
    const u = new URL(MYSQL_SERVER);
    u.username = "orbit_no_such_user";
    u.password = "s3cret-never-shown";
    u.pathname = `/${db.name}`;
    const p = await localPath(u.href, "auto", [socket]);
    assert.equal(p.url, u.href);
    assert.match(p.tcpBecause ?? "", /ER_ACCESS_DENIED_ERROR/);
    assert.doesNotMatch(p.tcpBecause ?? "", /s3cret/);
    assert.deepEqual(await localPath(db.url, "auto", ["/nonexistent/mysqld.sock"]), {
      url: db.url,
      tcpBecause: "no Unix socket at the usual paths",
    });
  });

  it("serves a node through the socket by default, and says so in its log", async () => {
    node = await startNode(db.url);
    const said = node.lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((o) => o.msg === "database");
    assert.deepEqual(said && [said.via, said.socket], ["unix socket", socket]);
    const res = await client(node.url, "").get("/v1/health");
    assert.equal(res.status, 200, res.text);
    const hosts = await db.query(
      "SELECT DISTINCT HOST AS host FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()",
      [db.name],
    );
    assert.ok(hosts.length > 0);
    assert.deepEqual(
      hosts.map((r) => r.host),
      ["localhost"],
      "the node's pools connect through the socket",
    );
  });
});

// One database per test file, so files never see each other's rows: created fresh,
// dropped at the end.
import mysql from "mysql2/promise";

export const MYSQL_SERVER = process.env.ORBIT_TEST_MYSQL ?? "mysql://root@127.0.0.1:3306";
/** The database server's port, for a proxy in front of it (proxy.ts). */
export const MYSQL_PORT = Number(new URL(MYSQL_SERVER).port || 3306);

export interface TestDatabase {
  readonly name: string;
  readonly url: string;
  /** A direct connection for assertions and for holding locks. */
  connect(): Promise<mysql.Connection>;
  /** One statement on a connection of its own, for assertions; its rows. */
  query(sql: string, params?: unknown[]): Promise<any[]>;
  /** This database's URL through a loopback proxy in front of the server (startProxy(MYSQL_PORT)). */
  urlVia(proxy: { readonly port: number }): string;
  drop(): Promise<void>;
}

export async function freshDatabase(label: string): Promise<TestDatabase> {
  const name = `orbit_t_${label.replace(/[^a-z0-9_]/gi, "_")}_${process.pid}`.slice(0, 64);
  const admin = await mysql.createConnection({ uri: MYSQL_SERVER });
  try {
    await admin.query(`DROP DATABASE IF EXISTS \`${name}\``);
  } finally {
    await admin.end();
  }
  const url = `${MYSQL_SERVER}/${name}`;
  const connect = () =>
    mysql.createConnection({ uri: url, timezone: "Z", supportBigNumbers: true, bigNumberStrings: true });
  return {
    name,
    url,
    connect,
    urlVia(proxy) {
      const via = new URL(MYSQL_SERVER);
      via.hostname = "127.0.0.1";
      via.port = String(proxy.port);
      via.pathname = `/${name}`;
      return via.href;
    },
    async query(sql, params = []) {
      const c = await connect();
      try {
        return (await c.query<any[]>(sql, params))[0];
      } finally {
        await c.end();
      }
    },
    async drop() {
      const c = await mysql.createConnection({ uri: MYSQL_SERVER });
      try {
        await c.query(`DROP DATABASE IF EXISTS \`${name}\``);
      } finally {
        await c.end();
      }
    },
  };
}

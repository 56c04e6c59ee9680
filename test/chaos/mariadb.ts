// A MariaDB server of the chaos run's own: a scratch data directory and a free port, so
// that the run can crash and restart the database process itself without touching the
// machine's server. Crashes are SIGKILL: InnoDB recovers from its redo log at the next
// start, and a commit the server confirmed must still be there.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import mysql from "mysql2/promise";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The first of these programs on PATH or in the sbin directories (mariadbd is in /usr/sbin). */
function which(names: string[]): string | undefined {
  const dirs = [...(process.env.PATH ?? "").split(":"), "/usr/sbin", "/usr/local/sbin"].filter(Boolean);
  for (const n of names) for (const d of dirs) if (existsSync(path.join(d, n))) return path.join(d, n);
  return undefined;
}

export class ChaosDatabase {
  readonly dir = mkdtempSync(path.join(tmpdir(), "orbit-chaos-db-"));
  private child: ChildProcess | undefined;
  private readonly server: string;
  /** How often the server was started: the first start and every restart. */
  starts = 0;

  private constructor(
    readonly port: number,
    server: string,
  ) {
    this.server = server;
  }

  /** Initialises a data directory and starts the server; throws when MariaDB is not installed. */
  static async create(port: number): Promise<ChaosDatabase> {
    const server = which(["mariadbd", "mysqld"]);
    const install = which(["mariadb-install-db", "mysql_install_db"]);
    if (!server || !install) throw new Error("the chaos run needs MariaDB's mariadbd and mariadb-install-db");
    const db = new ChaosDatabase(port, server);
    const res = spawnSync(
      install,
      [
        "--no-defaults",
        `--datadir=${db.datadir}`,
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        ...db.userArgs(),
      ],
      { encoding: "utf8" },
    );
    if (res.status !== 0) throw new Error(`mariadb-install-db failed: ${res.stderr || res.stdout}`);
    await db.start();
    return db;
  }

  private get datadir(): string {
    return path.join(this.dir, "data");
  }

  /** mariadbd refuses to run as root unless told to. */
  private userArgs(): string[] {
    return process.getuid?.() === 0 ? ["--user=root"] : [];
  }

  /** A URL of this server; root has no password on 127.0.0.1 (the install made it so). */
  url(database = ""): string {
    return `mysql://root@127.0.0.1:${this.port}/${database}`;
  }

  async start(): Promise<void> {
    this.child = spawn(
      this.server,
      [
        "--no-defaults",
        `--datadir=${this.datadir}`,
        `--port=${this.port}`,
        "--bind-address=127.0.0.1",
        `--socket=${path.join(this.dir, "mysqld.sock")}`,
        `--pid-file=${path.join(this.dir, "mysqld.pid")}`,
        `--log-error=${path.join(this.dir, "error.log")}`,
        "--innodb-buffer-pool-size=64M",
        "--max-connections=500",
        ...this.userArgs(),
      ],
      { stdio: "ignore" },
    );
    this.starts++;
    const deadline = Date.now() + 60_000;
    for (;;) {
      try {
        const c = await mysql.createConnection({ uri: this.url(), connectTimeout: 1000 });
        await c.end();
        return;
      } catch (e) {
        if (this.child.exitCode !== null || Date.now() > deadline)
          throw new Error(`mariadbd did not start (see ${path.join(this.dir, "error.log")})`, { cause: e });
        await sleep(100);
      }
    }
  }

  /** The process dies at once, mid-write: no shutdown, no flush beyond what InnoDB already made durable. */
  async crash(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await exited;
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    await Promise.race([exited, sleep(20_000).then(() => child.kill("SIGKILL"))]);
    await exited;
  }

  /** Stops the server and removes its data directory, unless `keep` (a failed run, to look at). */
  async remove(keep = false): Promise<void> {
    await this.stop();
    if (!keep) rmSync(this.dir, { recursive: true, force: true });
  }
}

// `floor.http`: what one HTTP request per result costs on this machine, in the same run as
// `db.commit` and `orbit.append`. 16 keep-alive workers POST the body an append sends to the
// smallest HTTP service an append could be (http-floor-server.ts, its own process): first
// answering only, then with one durable autocommit UPDATE per request — the most a service
// can reach here whose producers make one HTTP request per result, each with a commit of
// its own. Not a strict bound on `orbit.append` (Orbit shares commits between requests),
// but each of its results does more database work than this one-row UPDATE.
import { spawn } from "node:child_process";
import http from "node:http";
import path from "node:path";
import { createInterface } from "node:readline";
import mysql from "mysql2/promise";
import type { BenchOptions } from "./common.js";
import { dropDatabase, freshDatabase, mariadbPid, withCpu } from "./nodes.js";

const WORKERS = 16;
const WARMUP_SECONDS = 1;
const SERVER = path.resolve(process.cwd(), "dist/bench/http-floor-server.js");
/** The body and headers of an append (OrbitClient.completeAttempt), token-sized bearer included. */
const BODY = JSON.stringify({ outcome: "succeeded", result: { ok: true } });
const HEADERS = {
  "content-type": "application/json",
  "content-length": String(Buffer.byteLength(BODY)),
  authorization: `Bearer orbit_${"0".repeat(32)}_${"x".repeat(43)}`,
};

export interface HttpFloorWindow {
  requestsPerSec: number;
  /** CPU seconds per process in the window: the server, MariaDB, this client. */
  cpu: Record<string, number>;
}

export interface HttpFloorResult {
  /** HTTP only: the request answered, nothing written. */
  answerOnly: HttpFloorWindow;
  /** HTTP and one durable commit per request. */
  withCommit: HttpFloorWindow;
  workers: 16;
  seconds: number;
}

export async function measureHttpFloor(o: BenchOptions): Promise<HttpFloorResult> {
  const name = `orbit_bench_http_${process.pid}`;
  const url = await freshDatabase(o.mysqlUrl, name);
  const c = await mysql.createConnection({ uri: o.mysqlUrl });
  await c.query(`CREATE DATABASE \`${name}\``);
  await c.query(`CREATE TABLE \`${name}\`.http_rows (id INT PRIMARY KEY, n BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB`);
  await c.query(`INSERT INTO \`${name}\`.http_rows (id, n) VALUES ?`, [
    Array.from({ length: WORKERS }, (_, k) => [k, 0]),
  ]);
  await c.end();
  const seconds = o.quick ? 4 : 10;
  try {
    const answerOnly = await window(url, false, seconds);
    const withCommit = await window(url, true, seconds);
    return { answerOnly, withCommit, workers: WORKERS, seconds };
  } finally {
    await dropDatabase(o.mysqlUrl, name);
  }
}

async function window(databaseUrl: string, update: boolean, seconds: number): Promise<HttpFloorWindow> {
  const child = spawn(process.execPath, [SERVER, databaseUrl, update ? "--update" : "--answer-only"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const agent = new http.Agent({ keepAlive: true });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      createInterface({ input: child.stdout! }).once("line", (l) => resolve((JSON.parse(l) as { port: number }).port));
      child.once("exit", (code) => reject(new Error(`the HTTP floor server exited with ${code}`)));
    });
    await run(agent, port, WARMUP_SECONDS);
    const { result: n, cpu } = await withCpu({ server: child.pid, mariadb: mariadbPid() }, () =>
      run(agent, port, seconds),
    );
    return { requestsPerSec: n / cpu.wall!, cpu };
  } finally {
    agent.destroy();
    child.kill("SIGTERM");
  }
}

/** WORKERS loops, each one request at a time on its own row, for `seconds`; how many answered. */
async function run(agent: http.Agent, port: number, seconds: number): Promise<number> {
  const until = Date.now() + seconds * 1000;
  let answered = 0;
  await Promise.all(
    Array.from({ length: WORKERS }, async (_, k) => {
      while (Date.now() < until) {
        await post(agent, port, `/${k}`);
        answered++;
      }
    }),
  );
  return answered;
}

function post(agent: http.Agent, port: number, path: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: "127.0.0.1", port, path, method: "POST", agent, headers: HEADERS }, (res) => {
      res.on("data", () => {});
      res.on("end", () =>
        res.statusCode === 200 ? resolve() : reject(new Error(`HTTP floor: status ${res.statusCode}`)),
      );
    });
    req.on("error", reject);
    req.end(BODY);
  });
}

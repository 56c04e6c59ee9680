// Requests without a valid token cost a node a small, bounded amount of work: each is
// answered by a real node, and the node's own CPU time (read from /proc, so another
// process's load does not count) shows the work done, with a bound far above the linear
// cost and far below what a quadratic or unbounded one would take.
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { request } from "../helpers/http.js";
import { startNode, type OrbitNode } from "../helpers/orbit.js";

/** CPU time the process has used, user and system, in ms (Linux clock ticks of 10 ms). */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

describe("cheap work for requests without a valid token", function () {
  this.timeout(120000);
  let db: TestDatabase;
  let node: OrbitNode;

  before(async () => {
    db = await freshDatabase("cheap_work");
    node = await startNode(db.url);
  });
  after(() => node?.stop());

  it("answers paths of long colon runs in linear time", async () => {
    const colons = ":".repeat(14000);
    const paths = [`/${colons}/x`, `/v1/${colons}/x`, `/v1/tasks/${colons}/x`, `/${"a:".repeat(7000)}/x`];
    // Warm up: the first requests of a process compile its code.
    for (const path of paths) assert.equal((await request(node.url, { path })).status, 404);
    const before = cpuMs(node.process.pid!);
    for (let i = 0; i < 10; i++) {
      for (const path of paths) {
        for (const method of ["GET", "POST", "DELETE"]) {
          const res = await request(node.url, { method, path });
          assert.equal(res.status, 404, `${method} ${path.slice(0, 20)}…`);
          assert.equal(res.json.error.code, "NOT_FOUND");
        }
      }
    }
    // 120 requests of 14 kB: a linear router spends well under a second on them all; the
    // quadratic pattern spent about 0.2 s on each.
    const spent = cpuMs(node.process.pid!) - before;
    assert.ok(spent < 3000, `the node spent ${spent} ms of CPU on 120 requests for unknown paths`);
  });
});

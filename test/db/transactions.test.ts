// Pipelined transactions (src/db/tx.ts): on the main pool a transaction's opening and its
// deferred writes travel with its next statement or its COMMIT. What a caller relies on:
// they run in order before anything after them, and a failure among them fails the whole
// transaction with nothing written.
import { strict as assert } from "node:assert";
import type { RowDataPacket } from "mysql2/promise";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { createPool, ensureDatabase, parseDatabaseUrl, WAITERS_PER_CONNECTION, type Pool } from "../../src/db/pool.js";
import { defer, withTransaction } from "../../src/db/tx.js";
import { OrbitError } from "../../src/wire/errors.js";
import { databaseRetries } from "../../src/metrics.js";

describe("pipelined transactions", () => {
  let db: TestDatabase;
  let pool: Pool;

  before(async () => {
    db = await freshDatabase("transactions");
    await ensureDatabase(parseDatabaseUrl(db.url));
    pool = createPool(db.url, 2);
    await pool.query("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)");
  });
  after(async () => {
    await pool.end();
    await db.drop();
  });

  const insert = (id: number, v: number) => ({ sql: "INSERT INTO t (id, v) VALUES (?, ?)", params: [id, v] });
  const stored = async (id: number): Promise<number | undefined> => {
    const [rows] = await pool.query<RowDataPacket[]>("SELECT v FROM t WHERE id = ?", [id]);
    return rows[0]?.v as number | undefined;
  };

  it("runs deferred writes in order before the transaction's next statement, and commits them", async () => {
    const seen = await withTransaction(pool, async (tx) => {
      await defer(tx, insert(1, 10));
      await defer(tx, { sql: "UPDATE t SET v = v + 1 WHERE id = ?", params: [1] });
      const [rows] = await tx.query<RowDataPacket[]>("SELECT v FROM t WHERE id = ?", [1]);
      return rows[0]?.v as number;
    });
    assert.equal(seen, 11, "the SELECT saw both writes");
    assert.equal(await stored(1), 11);
  });

  it("commits writes that were only deferred (they go with COMMIT)", async () => {
    await withTransaction(pool, async (tx) => {
      await defer(tx, insert(2, 20));
    });
    assert.equal(await stored(2), 20);
  });

  it("fails the transaction when a deferred write fails at the next statement: nothing is written", async () => {
    await assert.rejects(
      withTransaction(pool, async (tx) => {
        await tx.query("INSERT INTO t (id, v) VALUES (3, 30)");
        await defer(tx, insert(4, 40));
        await defer(tx, insert(4, 41)); // duplicate key
        await tx.query("SELECT 1");
        assert.fail("the statement after a failed deferred write must not succeed");
      }),
      (e: { code?: string }) => e.code === "ER_DUP_ENTRY",
    );
    assert.equal(await stored(3), undefined, "the earlier, sent write was rolled back");
    assert.equal(await stored(4), undefined);
  });

  it("fails the transaction when a deferred write fails with COMMIT: nothing is written", async () => {
    await assert.rejects(
      withTransaction(pool, async (tx) => {
        await tx.query("INSERT INTO t (id, v) VALUES (5, 50)");
        await defer(tx, insert(6, 60));
        await defer(tx, insert(5, 51)); // duplicate key
      }),
      (e: { code?: string }) => e.code === "ER_DUP_ENTRY",
    );
    assert.equal(await stored(5), undefined);
    assert.equal(await stored(6), undefined);
    // The connection went back to the pool clean: the next transaction works.
    await withTransaction(pool, (tx) => defer(tx, insert(5, 52)));
    assert.equal(await stored(5), 52);
  });

  it("never commits deferred writes of a request that gave up (deadline passed)", async () => {
    const gaveUp = new AbortController();
    await assert.rejects(
      withTransaction(
        pool,
        async (tx) => {
          await defer(tx, insert(7, 70));
          gaveUp.abort();
        },
        gaveUp.signal,
      ),
      (e: unknown) => e instanceof OrbitError && e.code === "UNAVAILABLE",
    );
    assert.equal(await stored(7), undefined);
  });

  it("runs each transaction at the isolation level asked for, and the pool's otherwise", async () => {
    const level = (isolation?: "READ COMMITTED") =>
      withTransaction(
        pool,
        async (tx) => {
          // A read of another session's uncommitted-then-committed row tells the level apart:
          // READ COMMITTED sees a commit made after the transaction's first read.
          await tx.query("SELECT v FROM t WHERE id = 1");
          const other = await pool.getConnection();
          try {
            await other.query("UPDATE t SET v = v + 100 WHERE id = 1");
          } finally {
            other.release();
          }
          const [rows] = await tx.query<RowDataPacket[]>("SELECT v FROM t WHERE id = 1");
          return rows[0]!.v as number;
        },
        undefined,
        isolation,
      );
    const before = (await stored(1))!;
    assert.equal(await level("READ COMMITTED"), before + 100, "READ COMMITTED sees the other commit");
    assert.equal(await level(), before + 100, "REPEATABLE READ keeps its first snapshot");
  });

  it("starts no transaction whose deadline passed while it waited for a connection", async () => {
    // Both connections held: the transaction waits in the pool's queue.
    const held = [await pool.getConnection(), await pool.getConnection()];
    const controller = new AbortController();
    let ran = false;
    const late = withTransaction(
      pool,
      async (tx) => {
        ran = true;
        await tx.query("INSERT INTO t (id, v) VALUES (9, 9)");
      },
      controller.signal,
    );
    controller.abort(); // the request's deadline passes meanwhile
    held.forEach((c) => c.release());
    await assert.rejects(late, (e: unknown) => e instanceof OrbitError && e.code === "UNAVAILABLE");
    assert.equal(ran, false, "the transaction's work started after its deadline");
    assert.equal(await stored(9), undefined);
  });

  it("refuses at once a caller beyond the pool's wait queue, as UNAVAILABLE", async () => {
    const small = createPool(db.url, 1);
    const held = await small.getConnection();
    try {
      // 1 connection, WAITERS_PER_CONNECTION waiters: one more is refused.
      const waiting = Array.from({ length: WAITERS_PER_CONNECTION }, () =>
        withTransaction(small, async () => "served"),
      );
      await assert.rejects(
        withTransaction(small, async () => "served"),
        (e: unknown) => e instanceof OrbitError && e.code === "UNAVAILABLE",
      );
      held.release();
      assert.deepEqual(await Promise.all(waiting), Array(WAITERS_PER_CONNECTION).fill("served"));
    } finally {
      await small.end();
    }
  });

  it("runs a transaction again after a deadlock it lost, and it then commits once", async () => {
    await pool.query("INSERT INTO t (id, v) VALUES (20, 0), (21, 0)");
    const retried = async () =>
      (await databaseRetries.get()).values.find((v) => v.labels.kind === "deadlock")?.value ?? 0;
    const retriesBefore = await retried();
    // The other transaction holds row 21 and has written more rows: InnoDB rolls back the
    // lighter of two deadlocked transactions, so this one loses the first time.
    const other = await pool.getConnection();
    await other.query("START TRANSACTION");
    await other.query("UPDATE t SET v = v + 1 WHERE id = 21");
    await other.query("INSERT INTO t (id, v) VALUES (30, 0), (31, 0), (32, 0), (33, 0)");
    let attempts = 0;
    let otherDone: Promise<unknown> | undefined;
    await withTransaction(pool, async (tx) => {
      attempts++;
      await tx.query("UPDATE t SET v = v + 10 WHERE id = 20");
      if (attempts === 1) {
        // The other now waits for row 20, then this one asks for row 21: a deadlock.
        otherDone = other.query("UPDATE t SET v = v + 1 WHERE id = 20").then(() => other.query("COMMIT"));
        await new Promise((r) => setTimeout(r, 200));
      }
      await tx.query("UPDATE t SET v = v + 10 WHERE id = 21");
    });
    await otherDone;
    other.release();
    assert.equal(attempts, 2, "the transaction ran again after the deadlock");
    assert.equal(await retried(), retriesBefore + 1);
    assert.equal(await stored(20), 11);
    assert.equal(await stored(21), 11);
  });
});

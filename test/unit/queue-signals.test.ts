import { strict as assert } from "node:assert";
import { QueueSignals } from "../../src/domain/queue-signals.js";

const Q = "0123456789abcdef0123456789abcdef";
const OTHER = "fedcba9876543210fedcba9876543210";
const LONG = 60_000;

/** Starts `n` waits on `queue`, in order; `woken` lists the indices of those that returned. */
function waiters(signals: QueueSignals, n: number, queue = Q) {
  const woken: number[] = [];
  const aborts = Array.from({ length: n }, () => new AbortController());
  const all = aborts.map((a, i) => signals.wait(queue, LONG, a.signal).then(() => void woken.push(i)));
  const end = async () => {
    for (const a of aborts) a.abort();
    await Promise.all(all);
  };
  return { woken, end };
}

const turn = () => new Promise((r) => setImmediate(r));

describe("queue signals: waking waiting claims", () => {
  it("wakes one waiting claim per new task, the longest-waiting first", async () => {
    const signals = new QueueSignals();
    const w = waiters(signals, 3);
    signals.notify(Q, 1);
    await turn();
    assert.deepEqual(w.woken, [0]);
    signals.notify(Q, 1);
    await turn();
    assert.deepEqual(w.woken, [0, 1]);
    await w.end();
  });

  it("wakes every waiting claim when no count is given, and only on the named queue", async () => {
    const signals = new QueueSignals();
    const here = waiters(signals, 3);
    const there = waiters(signals, 2, OTHER);
    signals.notify(Q);
    await turn();
    assert.deepEqual(here.woken, [0, 1, 2]);
    assert.deepEqual(there.woken, []);
    await Promise.all([here.end(), there.end()]);
  });

  it("does nothing without waiters, and a later waiter is not woken by an earlier signal", async () => {
    const signals = new QueueSignals();
    signals.notify(Q, 1);
    const w = waiters(signals, 1);
    await turn();
    assert.deepEqual(w.woken, []);
    await w.end();
  });

  it("wakes all waiting claims at close, and a wait after close returns at once", async () => {
    const signals = new QueueSignals();
    const w = waiters(signals, 2);
    signals.close();
    await turn();
    assert.deepEqual(w.woken, [0, 1]);
    await signals.wait(Q, LONG); // would time the test out if it waited
  });
});

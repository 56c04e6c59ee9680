// Loaded into an `orbit serve` node with --import (helpers/clock.ts): the node's
// Date.now() is the millisecond the test last wrote to ORBIT_TEST_CLOCK_FILE, and stays
// there until the test moves it. Every time a lease rule compares (nowMs) comes from
// Date.now, so a test can put the node exactly at a lease's lease_until, and 1 ms past
// it, however long the machine takes in between. Timers (setTimeout, setInterval) keep
// real time: the node's rechecks, sweeps and deadlines still run.
import { readFileSync } from "node:fs";

const file = process.env.ORBIT_TEST_CLOCK_FILE;
if (file) Date.now = () => Number(readFileSync(file, "utf8"));

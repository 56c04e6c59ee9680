// Loaded into an `orbit serve` node of the chaos run with --import: the node's clock runs
// ORBIT_CHAOS_CLOCK_SKEW_MS ahead (or, negative, behind) of the machine's, as a node whose
// NTP drifted would. Every time a rule compares comes from Date.now (src/clock.ts).
const skew = Number(process.env.ORBIT_CHAOS_CLOCK_SKEW_MS ?? 0);
if (Number.isFinite(skew) && skew !== 0) {
  const real = Date.now;
  Date.now = () => real() + skew;
}

// The node's clock for everything it stores or compares with stored times. One place, so
// that every lease rule reads the same clock (tests put the node's Date.now where they
// want it, and every comparison follows).

/** Now, at the database's precision: times are stored in milliseconds, so nothing computed is finer. */
export function nowMs(): Date {
  return new Date(Math.floor(Date.now()));
}

// The claim pool's node protection (docs/protocol.md §5) as pure logic, with hand-written
// claimants: at most 4 claims in flight, at most 1 per application, served in rotation by
// application and subscription, waiting plus in flight at most 128; one claim serves the
// connections of a subscription that wait together.
import { strict as assert } from "node:assert";
import { ClaimScheduler, MAX_SEATS_PER_CLAIM, type Claimant } from "../../src/ws/claim-scheduler.js";

interface Probe {
  inFlight: number;
  maxInFlight: number;
  perApp: Map<string, number>;
  maxPerApp: number;
  /** One entry per claim: the labels of the connections it served, joined by "+". */
  order: string[];
  release: (() => void)[];
}

interface TestClaimant extends Claimant {
  readonly label: string;
}

function claimant(app: string, sub: string, label = `${app}/${sub}`): TestClaimant {
  return { applicationId: app, subscriptionId: sub, label };
}

function scheduler(p: Probe): ClaimScheduler<TestClaimant> {
  return new ClaimScheduler<TestClaimant>(
    (batch) =>
      new Promise<void>((resolve) => {
        const app = batch[0]!.applicationId;
        assert.ok(
          batch.every((c) => c.applicationId === app && c.subscriptionId === batch[0]!.subscriptionId),
          "one subscription per claim",
        );
        p.inFlight++;
        p.maxInFlight = Math.max(p.maxInFlight, p.inFlight);
        const n = (p.perApp.get(app) ?? 0) + 1;
        p.perApp.set(app, n);
        p.maxPerApp = Math.max(p.maxPerApp, n);
        p.order.push(batch.map((c) => c.label).join("+"));
        p.release.push(() => {
          p.inFlight--;
          p.perApp.set(app, (p.perApp.get(app) ?? 1) - 1);
          resolve();
        });
      }),
  );
}

/** Two turns: a finished claim schedules its scan with setImmediate, and that scan starts the next. */
const tick = () => new Promise((r) => setImmediate(() => setImmediate(r)));
const probe = (): Probe => ({ inFlight: 0, maxInFlight: 0, perApp: new Map(), maxPerApp: 0, order: [], release: [] });

async function drain(p: Probe, s: ClaimScheduler<TestClaimant>): Promise<void> {
  await tick(); // requests start their claims on the next turn
  for (let i = 0; i < 1000 && (p.release.length > 0 || s.inFlightCount > 0); i++) {
    p.release.shift()?.();
    await tick();
  }
}

describe("claim scheduler", () => {
  it("runs at most 4 claims at once and at most 1 per application", async () => {
    const p = probe();
    const s = scheduler(p);
    for (let a = 0; a < 6; a++) for (let i = 0; i < 5; i++) s.request(claimant(`app${a}`, `sub${i}`));
    await tick();
    assert.equal(p.inFlight, 4);
    await drain(p, s);
    assert.equal(p.maxInFlight, 4);
    assert.equal(p.maxPerApp, 1);
    assert.equal(p.order.length, 30, "every request ran once");
  });

  it("rotates between applications so a busy one cannot starve a quiet one", async () => {
    const p = probe();
    const s = scheduler(p);
    for (let i = 0; i < 20; i++) s.request(claimant("busy", `sub${i}`));
    s.request(claimant("quiet", "only"));
    await drain(p, s);
    assert.ok(p.order.indexOf("quiet/only") <= 1, `quiet served at ${p.order.indexOf("quiet/only")}`);
  });

  it("rotates between applications when more ask than claims can run: an application served goes behind those still waiting", async () => {
    // Six applications with work enough for many claims, four claims at once: the per-application
    // limit alone lets the first four take turns forever; the last two must be served before any
    // application gets a second claim.
    const p = probe();
    const s = scheduler(p);
    for (let a = 0; a < 6; a++) for (let i = 0; i < 3; i++) s.request(claimant(`app${a}`, `sub${i}`));
    await drain(p, s);
    assert.equal(p.order.length, 18);
    const firstSix = p.order.slice(0, 6).map((label) => label.split("/")[0]);
    assert.deepEqual(
      [...firstSix].sort(),
      ["app0", "app1", "app2", "app3", "app4", "app5"],
      `first claims: ${firstSix.join(", ")}`,
    );
  });

  it("rotates between subscriptions within an application", async () => {
    const p = probe();
    const s = scheduler(p);
    for (let i = 0; i < 3; i++) s.request(claimant("app", `hot${i}`));
    await tick(); // hot0 runs; hot1, hot2 wait
    s.request(claimant("app", "cold"));
    s.request(claimant("app", "hot0", "hot0-again"));
    await drain(p, s);
    // Each subscription waits its turn in the order it asked; hot0, served first, does not
    // jump the queue when it asks again.
    assert.deepEqual(p.order, ["app/hot0", "app/hot1", "app/hot2", "app/cold", "hot0-again"]);
  });

  it("serves the waiting connections of one subscription with one claim, in arrival order", async () => {
    const p = probe();
    const s = scheduler(p);
    const cs = [
      claimant("app", "sub", "c1"),
      claimant("app", "sub", "c2"),
      claimant("app", "sub", "c3"),
      claimant("app", "other", "o1"),
    ];
    for (const c of cs) s.request(c);
    await drain(p, s);
    assert.deepEqual(p.order, ["c1+c2+c3", "o1"]);
    assert.equal(p.maxPerApp, 1, "still one claim in flight per application");
  });

  it(`serves at most ${MAX_SEATS_PER_CLAIM} connections per claim; the rest wait their turn`, async () => {
    const p = probe();
    const s = scheduler(p);
    for (let i = 0; i < MAX_SEATS_PER_CLAIM + 2; i++) s.request(claimant("app", "sub", `c${i}`));
    await drain(p, s);
    assert.equal(p.order.length, 2);
    assert.equal(p.order[0]!.split("+").length, MAX_SEATS_PER_CLAIM);
    assert.equal(p.order[1], `c${MAX_SEATS_PER_CLAIM}+c${MAX_SEATS_PER_CLAIM + 1}`);
  });

  it(`sends a subscription's connections left over beyond ${MAX_SEATS_PER_CLAIM} behind the application's other subscriptions`, async () => {
    // A subscription with many connections must not hold its application's one claim slot
    // claim after claim while another subscription of that application waits.
    const p = probe();
    const s = scheduler(p);
    for (let i = 0; i < MAX_SEATS_PER_CLAIM + 2; i++) s.request(claimant("app", "big", `c${i}`));
    s.request(claimant("app", "small"));
    await drain(p, s);
    assert.deepEqual(p.order.slice(1), ["app/small", `c${MAX_SEATS_PER_CLAIM}+c${MAX_SEATS_PER_CLAIM + 1}`]);
  });

  it("keeps one request per connection and claims again if asked while running", async () => {
    const p = probe();
    const s = scheduler(p);
    const c = claimant("a", "s");
    s.request(c);
    s.request(c);
    await tick();
    assert.equal(p.order.length, 1);
    s.request(c); // while running
    await drain(p, s);
    assert.equal(p.order.length, 2, "once more afterwards, not twice");
  });

  it("holds at most 128 waiting plus in flight", async () => {
    const p = probe();
    const s = scheduler(p);
    for (let i = 0; i < 200; i++) s.request(claimant(`app${i}`, "s"));
    await drain(p, s);
    assert.equal(p.order.length, 128);
  });

  it("starts nothing after stop and waits for what runs", async () => {
    const p = probe();
    const s = scheduler(p);
    s.request(claimant("a", "s"));
    await tick();
    const stopped = s.stop();
    s.request(claimant("b", "s"));
    p.release.shift()!();
    await stopped;
    await tick(); // a claim asked for after the stop would start on a later turn
    assert.equal(p.order.length, 1);
  });
});

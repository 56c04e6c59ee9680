// The claim pool's node protection (spec §5) as pure logic, with hand-written claimants:
// at most 4 claims in flight, at most 1 per application, served in rotation by
// application and subscription, waiting plus in flight at most 128.
import { strict as assert } from "node:assert";
import { ClaimScheduler, type Claimant } from "../../src/ws/claim-scheduler.js";

interface Probe {
  inFlight: number;
  maxInFlight: number;
  perApp: Map<string, number>;
  maxPerApp: number;
  order: string[];
  release: (() => void)[];
}

function claimant(p: Probe, app: string, sub: string, label = `${app}/${sub}`): Claimant {
  return {
    applicationId: app,
    subscriptionId: sub,
    runClaim: () =>
      new Promise<void>((resolve) => {
        p.inFlight++;
        p.maxInFlight = Math.max(p.maxInFlight, p.inFlight);
        const n = (p.perApp.get(app) ?? 0) + 1;
        p.perApp.set(app, n);
        p.maxPerApp = Math.max(p.maxPerApp, n);
        p.order.push(label);
        p.release.push(() => {
          p.inFlight--;
          p.perApp.set(app, (p.perApp.get(app) ?? 1) - 1);
          resolve();
        });
      }),
  };
}

const tick = () => new Promise((r) => setImmediate(r));
const probe = (): Probe => ({ inFlight: 0, maxInFlight: 0, perApp: new Map(), maxPerApp: 0, order: [], release: [] });

async function drain(p: Probe, s: ClaimScheduler): Promise<void> {
  await tick(); // requests start their claims on the next microtask
  for (let i = 0; i < 1000 && (p.release.length > 0 || s.inFlightCount > 0); i++) {
    p.release.shift()?.();
    await tick();
  }
}

describe("claim scheduler", () => {
  it("runs at most 4 claims at once and at most 1 per application", async () => {
    const p = probe();
    const s = new ClaimScheduler();
    for (let a = 0; a < 6; a++) for (let i = 0; i < 5; i++) s.request(claimant(p, `app${a}`, `sub${i}`));
    await tick();
    assert.equal(p.inFlight, 4);
    await drain(p, s);
    assert.equal(p.maxInFlight, 4);
    assert.equal(p.maxPerApp, 1);
    assert.equal(p.order.length, 30, "every request ran once");
  });

  it("rotates between applications so a busy one cannot starve a quiet one", async () => {
    const p = probe();
    const s = new ClaimScheduler();
    for (let i = 0; i < 20; i++) s.request(claimant(p, "busy", `sub${i}`));
    s.request(claimant(p, "quiet", "only"));
    await drain(p, s);
    assert.ok(p.order.indexOf("quiet/only") <= 1, `quiet served at ${p.order.indexOf("quiet/only")}`);
  });

  it("rotates between subscriptions within an application", async () => {
    const p = probe();
    const s = new ClaimScheduler();
    for (let i = 0; i < 5; i++) s.request(claimant(p, "app", "hot", `hot${i}`));
    s.request(claimant(p, "app", "cold", "cold"));
    await drain(p, s);
    assert.ok(p.order.indexOf("cold") <= 1, `cold served at ${p.order.indexOf("cold")}`);
  });

  it("keeps one request per connection and claims again if asked while running", async () => {
    const p = probe();
    const s = new ClaimScheduler();
    const c = claimant(p, "a", "s");
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
    const s = new ClaimScheduler();
    for (let i = 0; i < 200; i++) s.request(claimant(p, `app${i}`, "s"));
    await drain(p, s);
    assert.equal(p.order.length, 128);
  });

  it("starts nothing after stop and waits for what runs", async () => {
    const p = probe();
    const s = new ClaimScheduler();
    s.request(claimant(p, "a", "s"));
    await tick();
    const stopped = s.stop();
    s.request(claimant(p, "b", "s"));
    p.release.shift()!();
    await stopped;
    assert.equal(p.order.length, 1);
  });
});

// GET /metrics answers from memory: the database gauges are read in the background, so a
// scrape runs no query and still answers 200, with the last values, while the database is
// unreachable (a TCP proxy between node and MariaDB is cut), and the refresh's age and
// failures show it. With ORBIT_METRICS_PORT the metrics have a listener of their own,
// the only one that names subscriptions; the main port's /metrics is 404 then.
import { strict as assert } from "node:assert";
import net from "node:net";
import { freshDatabase, MYSQL_PORT, type TestDatabase } from "../helpers/db.js";
import { bootstrap, startNode, type BootstrapOutput, type OrbitNode } from "../helpers/orbit.js";
import { client } from "../helpers/api.js";
import { request } from "../helpers/http.js";
import { assertContract, assertError } from "../helpers/contract.js";
import { startProxy, type Proxy } from "../helpers/proxy.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A sample's value in a Prometheus text scrape; NaN when absent. */
function sample(text: string, series: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? NaN : Number(line.slice(series.length + 1));
}

/** Scrapes `url` until `done` holds for the text (at most 10 s). */
async function scrapeUntil(url: string, done: (text: string) => boolean): Promise<string> {
  let text = "";
  for (const end = Date.now() + 10000; Date.now() < end; await sleep(50)) {
    text = (await request(url, { path: "/metrics" })).text;
    if (done(text)) return text;
  }
  assert.fail(`the scrape never got there:\n${text}`);
}

describe("metrics from memory and on a listener of their own", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let cred: BootstrapOutput;
  let proxy: Proxy | undefined;
  let node: OrbitNode | undefined;

  before(async () => {
    db = await freshDatabase("metrics");
    cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
  });
  afterEach(async () => {
    await node?.stop();
    node = undefined;
    await proxy?.close();
    proxy = undefined;
  });
  after(async () => {
    await db?.drop();
  });

  /** A subscription with `n` results not materialised yet (lag n), through the main port. */
  async function backlog(url: string, name: string, n: number): Promise<string> {
    const api = client(url, cred.token);
    const q = cred.queues[0]!.id;
    const created = await api.post("/v1/subscriptions", { name, queue_id: q });
    assert.equal(created.status, 201, created.text);
    for (let i = 0; i < n; i++) {
      const t = (await api.post("/v1/tasks", { queue_id: q, input: i })).json.data.task;
      await api.post(`/v1/tasks/${t.id}:cancel`, { expected_revision: "1", reason: "r" });
    }
    return created.json.data.subscription.id as string;
  }

  it("scrapes with the database cut: 200, the last values kept, the refresh failing shows; recovers by itself", async () => {
    proxy = await startProxy(MYSQL_PORT);
    node = await startNode(db.urlVia(proxy), { ORBIT_METRICS_PORT: "0", ORBIT_METRICS_REFRESH_MS: "200" });
    const metricsUrl = `http://127.0.0.1:${node.metricsPort}`;
    const sub = await backlog(node.url, "cut", 3);
    const lag = `orbit_materialisation_lag_events{subscription_id="${sub}"}`;
    let text = await scrapeUntil(metricsUrl, (t) => sample(t, lag) >= 3);
    const before = sample(text, lag);
    assert.equal(sample(text, "orbit_metrics_refresh_errors_total"), 0);
    assert.ok(sample(text, "orbit_metrics_refresh_age_seconds") < 2);

    proxy.cut();
    // Every scrape answers at once, from memory: a query would fail (503) or wait.
    for (let i = 0; i < 20; i++) {
      const started = Date.now();
      const res = await request(metricsUrl, { path: "/metrics" });
      assert.equal(res.status, 200);
      assert.ok(Date.now() - started < 1000, "answered without the database");
      assert.equal(sample(res.text, lag), before, "the last value read is kept");
    }
    text = await scrapeUntil(
      metricsUrl,
      (t) =>
        sample(t, "orbit_metrics_refresh_errors_total") >= 2 && sample(t, "orbit_metrics_refresh_age_seconds") > 0.5,
    );
    assert.equal(sample(text, lag), before);
    assert.equal(sample(text, "orbit_materialisation_lag_events_max"), before);
    assert.ok(
      node.lines.some((l) => l.includes('"msg":"metrics refresh failed"')),
      "the failure is logged (warn)",
    );

    proxy.restore();
    text = await scrapeUntil(metricsUrl, (t) => sample(t, "orbit_metrics_refresh_age_seconds") < 0.5);
    assert.equal(sample(text, lag), before);
  });

  it("scrapes while the database holds every answer back: no query waits behind a scrape", async () => {
    proxy = await startProxy(MYSQL_PORT);
    node = await startNode(db.urlVia(proxy), { ORBIT_METRICS_REFRESH_MS: "200" });
    await scrapeUntil(node.url, (t) => sample(t, "orbit_metrics_refresh_age_seconds") < 1);
    proxy.hold();
    try {
      await sleep(300);
      const res = await request(node.url, { path: "/metrics" });
      assert.equal(res.status, 200);
      assert.match(res.text, /^orbit_materialisation_lag_events_max \d+$/m);
    } finally {
      proxy.release();
    }
  });

  it("ORBIT_METRICS_PORT: every series there, GET /metrics only; the main port answers 404; closed on shutdown", async () => {
    node = await startNode(db.url, { ORBIT_METRICS_PORT: "0", ORBIT_METRICS_REFRESH_MS: "200" });
    assert.ok(node.metricsPort && node.metricsPort !== node.port, "the listening line names the metrics port");
    const metricsUrl = `http://127.0.0.1:${node.metricsPort}`;
    const sub = await backlog(node.url, "listener", 1);
    const text = await scrapeUntil(metricsUrl, (t) =>
      t.includes(`orbit_materialisation_lag_events{subscription_id="${sub}"}`),
    );
    assert.match(text, /^orbit_materialisation_lag_events_max \d+$/m);
    assert.match(text, /^orbit_http_requests_total\{route="submitTask",status="201"\} \d+$/m);
    assert.match(text, /^process_resident_memory_bytes \d+$/m);
    assert.ok(!text.includes(cred.token.slice(-43)), "no secret");

    const main = await request(node.url, { path: "/metrics" });
    assertError(main, 404, "NOT_FOUND");
    assertContract("getMetrics", main);

    assert.equal((await request(metricsUrl, { path: "/v1/health" })).status, 404, "nothing else on it");
    assert.equal((await request(metricsUrl, { path: "/metricsx" })).status, 404);
    const post = await request(metricsUrl, { method: "POST", path: "/metrics", body: "{}" });
    assert.equal(post.status, 405);
    assert.equal(post.headers.allow, "GET, HEAD");
    const head = await request(metricsUrl, { method: "HEAD", path: "/metrics" });
    assert.equal(head.status, 200);

    const port = node.metricsPort;
    assert.equal(await node.stop(), 0);
    node = undefined;
    const refused = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, "127.0.0.1");
      s.once("connect", () => (s.destroy(), resolve(false)));
      s.once("error", () => resolve(true));
    });
    assert.ok(refused, "the metrics listener closed with the node");
  });

  it("without ORBIT_METRICS_PORT the main port serves the metrics, naming no subscription", async () => {
    node = await startNode(db.url, { ORBIT_METRICS_REFRESH_MS: "200" });
    assert.equal(node.metricsPort, undefined);
    const sub = await backlog(node.url, "public", 1);
    const text = await scrapeUntil(node.url, (t) => sample(t, "orbit_materialisation_lag_events_max") >= 1);
    assert.ok(!text.includes(sub));
    assert.doesNotMatch(text, /subscription_id/);
  });

  it("a metrics port in use stops the node at start, saying so", async () => {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    try {
      const port = (taken.address() as net.AddressInfo).port;
      await assert.rejects(
        startNode(db.url, { ORBIT_METRICS_PORT: String(port) }),
        new RegExp(`cannot listen on 127\\.0\\.0\\.1:${port}: the address is in use`),
      );
    } finally {
      taken.close();
    }
  });
});

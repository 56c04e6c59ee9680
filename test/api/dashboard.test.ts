// The Grafana dashboard shipped in docs/grafana/ reads only series a node exposes: every
// metric and label its queries name is on a real node's /metrics once the node has done
// the work each series counts (a result delivered and ACKed, claims, a refusal).
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import path from "node:path";
import { client } from "../helpers/api.js";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { cancelledResults, queueWithSubscription } from "../helpers/fixtures.js";
import { request } from "../helpers/http.js";
import { bootstrap, startNode, type OrbitNode } from "../helpers/orbit.js";
import { connect } from "../helpers/ws.js";

interface Dashboard {
  panels: { title: string; targets: { expr: string }[] }[];
}

const DASHBOARD = path.resolve(process.cwd(), "docs/grafana/orbit-dashboard.json");
/** PromQL's own words, and Grafana's interval variable, are not series. */
const PROMQL = new Set(["sum", "max", "count", "rate", "by", "le", "histogram_quantile", "__rate_interval"]);

/** Series names and the labels each query names (in `by (…)` and `{…}` matchers). */
function queried(expr: string): { metrics: string[]; labels: string[] } {
  const labels = [
    ...[...expr.matchAll(/by \(([^)]*)\)/g)].flatMap((m) => m[1]!.split(",").map((l) => l.trim())),
    ...[...expr.matchAll(/\{([^}]*)\}/g)].flatMap((m) => [...m[1]!.matchAll(/([a-z_]+)\s*=~?/g)].map((l) => l[1]!)),
  ].filter((l) => l !== "le" && l !== "instance"); // Prometheus' own labels
  const words = (expr.replace(/"[^"]*"/g, "").match(/[a-zA-Z_:][a-zA-Z0-9_:]*/g) ?? []).filter(
    (w) => !PROMQL.has(w) && !labels.includes(w) && w !== "instance" && w !== "le",
  );
  return { metrics: [...new Set(words)], labels: [...new Set(labels)] };
}

describe("docs/grafana/orbit-dashboard.json", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let node: OrbitNode;
  let scrape: string;
  const dashboard = JSON.parse(readFileSync(DASHBOARD, "utf8")) as Dashboard;

  before(async () => {
    db = await freshDatabase("dashboard");
    node = await startNode(db.url, { ORBIT_METRICS_REFRESH_MS: "200" });
    const cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["q"], eventAccess: true });
    const api = client(node.url, cred.token);
    const { q, sub } = await queueWithSubscription(db, cred, api);
    await cancelledResults(api, q, 1);
    const s = await connect(node.url, { token: cred.token });
    await s.hello(sub, 1);
    const deliver = await s.nextOfType("event.deliver");
    assert.equal((await s.ack(deliver)).type, "ack");
    s.close();
    // A refusal in the 4xx/5xx range the panel shows, from a path no operation has.
    await request(node.url, { path: "/v1/nowhere" });
    await new Promise((r) => setTimeout(r, 500)); // a refresh of the database gauges
    scrape = (await request(node.url, { path: "/metrics" })).text;
  });
  after(() => node?.stop());

  it("is a dashboard with queries", () => {
    assert.ok(dashboard.panels.length >= 10);
    for (const p of dashboard.panels) assert.ok(p.targets.length > 0, `${p.title} has no query`);
  });

  it("queries only series and labels the node exposes", () => {
    const lines = scrape.split("\n").filter((l) => l && !l.startsWith("#"));
    for (const panel of dashboard.panels) {
      for (const { expr } of panel.targets) {
        const { metrics, labels } = queried(expr);
        assert.ok(metrics.length > 0, `${panel.title}: no series in ${expr}`);
        for (const metric of metrics) {
          const series = lines.filter((l) => l.startsWith(`${metric}{`) || l.startsWith(`${metric} `));
          assert.ok(series.length > 0, `${panel.title}: ${metric} is not on /metrics`);
          for (const label of labels) {
            // A label belongs to the query's metric when one of its series carries it.
            if (metrics.length === 1) {
              assert.ok(
                series.some((l) => l.includes(`${label}="`)),
                `${panel.title}: ${metric} has no label ${label}`,
              );
            }
          }
        }
      }
    }
  });
});

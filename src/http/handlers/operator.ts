// Operator endpoints the protocol is silent on (documented in openapi.yaml): a health check
// for load balancers and a "who am I" for token holders.
import type { Handler } from "../../../generated/http/routes.js";
import { appliedVersion, loadMigrations } from "../../db/migrate.js";
import { registry } from "../../metrics.js";
import { notFound, unavailable } from "../../wire/errors.js";
import type { HandlerContext } from "../router.js";

export const getHealth: Handler<"getHealth", HandlerContext> = async (_req, ctx) => {
  await ctx.pool.query("SELECT 1");
  return { status: 200, data: { status: "ok" } };
};

export const getCurrentCredential: Handler<"getCurrentCredential", HandlerContext> = async (_req, ctx) => {
  const caller = ctx.caller();
  return {
    status: 200,
    data: {
      namespace_id: caller.namespaceId,
      application_id: caller.applicationId,
      credential_id: caller.credentialId,
      actions: [...caller.actions].sort(),
      // By UTF-16 code unit, as the actions: localeCompare follows the process's locale,
      // so two nodes could answer the same credential in different orders.
      queues: [...caller.queues]
        .map(([id, name]) => ({ id, name }))
        .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)),
    },
  };
};

export const getLiveness: Handler<"getLiveness", HandlerContext> = async () => ({
  status: 200,
  data: { status: "ok" },
});

/** Ready: the database answers and the schema is the one this code knows. */
export const getReadiness: Handler<"getReadiness", HandlerContext> = async (_req, ctx) => {
  // A database not created or not migrated yet is 503 (tx.ts isUnavailableError).
  const [applied, known] = await Promise.all([appliedVersion(ctx.pool), loadMigrations()]);
  if (applied !== known.length) throw unavailable();
  return { status: 200, data: { status: "ready", migration: applied } };
};

/**
 * From memory only: the database gauges are refreshed in the background (background.ts),
 * so a scrape costs no query and still answers while the database is down. This port is
 * the tenants' too: the public registry names no subscription (metrics.ts).
 */
export const getMetrics: Handler<"getMetrics", HandlerContext> = async () => ({
  status: 200,
  raw: await registry.metrics(),
});

/** With ORBIT_METRICS_PORT set, the metrics are served there only. */
export const metricsOnOwnListener: Handler<"getMetrics", HandlerContext> = async () => {
  throw notFound();
};

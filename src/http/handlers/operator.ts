// Operator endpoints the spec is silent on (documented in openapi.yaml): a health check
// for load balancers and a "who am I" for token holders.
import type { Handler } from "../../../generated/http/routes.js";
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
      queues: [...caller.queues].map(([id, name]) => ({ id, name })).sort((a, b) => a.name.localeCompare(b.name)),
    },
  };
};

// The management example (spec §8): create, read, pause, resume, and a replay that shows
// idempotency. No consumer. Run: npm run example:management (next to a running node).
import { OrbitApiError } from "orbit";
import { say, setup } from "./lib/setup.js";

const { client, queueId } = setup("management");
// Persist keys like these before calling, and reuse them after a crash.
const run = Date.now().toString(36);
const createKey = `create-object-results-${run}`;
const request = { name: `object-results-${run}`, queue_id: queueId, max_pending: 100, max_attempts: 20 };

const created = await client.createSubscription(createKey, request);
say(`created ${created.subscription.id} revision ${created.subscription.revision} deduplicated=${created.deduplicated}`);

const current = await client.getSubscription(created.subscription.id);
say(`read: enabled=${current.enabled} types=${current.types.join(",")} cursor_sequence=${current.cursor_sequence}`);

const paused = await client.configureSubscription(current.id, `pause-${run}`, {
  expected_revision: current.revision, enabled: false, reason: "receiver maintenance",
});
say(`paused: enabled=${paused.subscription.enabled} revision ${paused.subscription.revision}`);

const resumed = await client.configureSubscription(current.id, `resume-${run}`, {
  expected_revision: paused.subscription.revision, enabled: true, reason: "maintenance over",
});
say(`resumed: enabled=${resumed.subscription.enabled} revision ${resumed.subscription.revision}`);

// The same key and content again: the ORIGINAL receipt, nothing new is created.
const replay = await client.createSubscription(createKey, request);
say(`replayed create: deduplicated=${replay.deduplicated} revision ${replay.subscription.revision} (the original snapshot)`);

// The same key with other content is refused.
try {
  await client.createSubscription(createKey, { ...request, max_pending: 5 });
} catch (e) {
  if (!(e instanceof OrbitApiError)) throw e;
  say(`same key, other content: ${e.status} ${e.code}`);
}

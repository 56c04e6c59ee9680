// The management example (docs/protocol.md §8): create, read, pause, resume, and a replay
// that shows idempotency. No consumer. Run: npm run example:management (next to a running
// node). Every step checks the answer it shows: an unexpected one throws, and the example
// exits 1.
import { OrbitApiError } from "@orbit-events/sdk";
import { say, setup } from "./lib/setup.js";

function expect(ok: boolean, what: string): void {
  if (!ok) throw new Error(`unexpected answer: ${what}`);
}

const { client, queueId } = setup("management");
// Persist keys like these before calling, and reuse them after a crash.
const run = Date.now().toString(36);
const createKey = `create-object-results-${run}`;
const request = { name: `object-results-${run}`, queue_id: queueId, max_pending: 100, max_attempts: 20 };

const created = await client.createSubscription(createKey, request);
say(
  `created ${created.subscription.id} revision ${created.subscription.revision} deduplicated=${created.deduplicated}`,
);
expect(!created.deduplicated && created.subscription.revision === "1", "the first create is new, at revision 1");

const current = await client.getSubscription(created.subscription.id);
say(`read: enabled=${current.enabled} types=${current.types.join(",")} cursor_sequence=${current.cursor_sequence}`);
expect(current.id === created.subscription.id && current.revision === "1", "the read shows the created subscription");

const paused = await client.configureSubscription(current.id, `pause-${run}`, {
  expected_revision: current.revision,
  enabled: false,
  reason: "receiver maintenance",
});
say(`paused: enabled=${paused.subscription.enabled} revision ${paused.subscription.revision}`);
expect(!paused.subscription.enabled && paused.subscription.revision === "2", "the pause moves the revision 1 → 2");

// Resume with a new key and the revision a read returns (docs/protocol.md §3): a write's receipt is
// the state it made, and a replayed one (deduplicated) may be long out of date.
const beforeResume = await client.getSubscription(current.id);
say(`read back: enabled=${beforeResume.enabled} revision ${beforeResume.revision}`);
expect(!beforeResume.enabled && beforeResume.revision === "2", "the read shows the paused subscription at revision 2");

const resumed = await client.configureSubscription(current.id, `resume-${run}`, {
  expected_revision: beforeResume.revision,
  enabled: true,
  reason: "maintenance over",
});
say(`resumed: enabled=${resumed.subscription.enabled} revision ${resumed.subscription.revision}`);
expect(resumed.subscription.enabled && resumed.subscription.revision === "3", "the resume moves the revision 2 → 3");

// The same key and content again: the ORIGINAL receipt, nothing new is created.
const replay = await client.createSubscription(createKey, request);
say(
  `replayed create: deduplicated=${replay.deduplicated} revision ${replay.subscription.revision} (the original snapshot)`,
);
expect(
  replay.deduplicated && replay.subscription.id === created.subscription.id && replay.subscription.revision === "1",
  "the replayed create was not deduplicated with the original snapshot",
);

// The same key with other content is refused.
let refused: OrbitApiError | undefined;
try {
  await client.createSubscription(createKey, { ...request, max_pending: 5 });
} catch (e) {
  if (!(e instanceof OrbitApiError)) throw e;
  refused = e;
  say(`same key, other content: ${e.status} ${e.code}`);
}
expect(
  refused?.status === 409 && refused.code === "IDEMPOTENCY_CONFLICT",
  "the same key with other content was not refused with 409 IDEMPOTENCY_CONFLICT",
);

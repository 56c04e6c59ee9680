// The batch worker calls are their single calls' shapes, item by item (openapi.yaml): an
// item of completeAttempts is completeAttempt's body plus its attempt_id — the server
// checks each item with completeAttempt's own validator (http/handlers/completions.ts) —
// and a claim of claimTasks is exactly claimTask's ClaimResult.
import { strict as assert } from "node:assert";
import { MAX_BATCH } from "../../src/domain/attempt-batches.js";
import { OPENAPI } from "../helpers/openapi.js";

const schemas = OPENAPI.components.schemas;

describe("contract: batch worker calls", () => {
  it("CompleteAttemptsItem is CompleteAttemptRequest plus attempt_id", () => {
    const item = schemas.CompleteAttemptsItem;
    const single = schemas.CompleteAttemptRequest;
    const { attempt_id, ...rest } = item.properties;
    assert.deepEqual(attempt_id.$ref, "#/components/schemas/Id");
    const strip = (props: Record<string, any>) =>
      Object.fromEntries(Object.entries(props).map(([k, v]) => [k, { ...v, description: undefined }]));
    assert.deepEqual(strip(rest), strip(single.properties));
    assert.deepEqual([...item.required].sort(), ["attempt_id", ...single.required].sort());
    assert.equal(item.additionalProperties, false);
  });

  it("the batches hold 1 to 32 items, and a claim is ClaimResult", () => {
    assert.deepEqual(
      [schemas.ClaimTasksRequest.properties.max_tasks.minimum, schemas.ClaimTasksRequest.properties.max_tasks.maximum],
      [1, 32],
    );
    for (const array of [
      schemas.ClaimTasksResult.properties.claims,
      schemas.CompleteAttemptsRequest.properties.items,
      schemas.CompleteAttemptsResult.properties.items,
    ])
      assert.deepEqual([array.minItems, array.maxItems], [1, 32]);
    assert.equal(MAX_BATCH, 32, "a request's items go in one batch of the group commit");
    assert.equal(schemas.ClaimTasksResult.properties.claims.items.$ref, "#/components/schemas/ClaimResult");
    assert.deepEqual(schemas.ClaimTasksRequest.properties.wait_ms, {
      ...schemas.ClaimTaskRequest.properties.wait_ms,
      description: schemas.ClaimTasksRequest.properties.wait_ms.description,
    });
  });
});

// A client may ACK a delivery on any of its connections (docs/protocol.md §6). When it
// ACKs on another connection of the same node, the connection that sent the delivery has
// its slot back at once, not when the lease would have run out.
import { strict as assert } from "node:assert";
import { client } from "../helpers/api.js";
import { freshDatabase, type TestDatabase } from "../helpers/db.js";
import { cancelledResults, queueWithSubscription } from "../helpers/fixtures.js";
import { bootstrap, startNode, type OrbitNode } from "../helpers/orbit.js";
import { connect, type TestSocket } from "../helpers/ws.js";

describe("an ACK on another connection of the node", function () {
  this.timeout(60000);
  let db: TestDatabase;
  let node: OrbitNode;
  const sockets: TestSocket[] = [];

  before(async () => {
    db = await freshDatabase("ack_elsewhere");
    // A long lease: the slot must come back long before it would run out.
    node = await startNode(db.url, { ORBIT_LEASE_DURATION_MS: "60000" });
  });
  after(async () => {
    for (const s of sockets) s.ws.terminate();
    await node?.stop();
  });

  it("frees the slot of the connection that sent the delivery", async () => {
    const cred = await bootstrap(db.url, { namespace: "ns", application: "app", queues: ["base"], eventAccess: true });
    const api = client(node.url, cred.token);
    const { q, sub } = await queueWithSubscription(db, cred, api);
    await cancelledResults(api, q, 3);

    const a = await connect(node.url, { token: cred.token });
    sockets.push(a);
    await a.hello(sub, 1);
    const first = await a.nextOfType("event.deliver");
    const b = await connect(node.url, { token: cred.token });
    sockets.push(b);
    await b.hello(sub, 1);
    await b.nextOfType("event.deliver"); // b holds the second result

    // The client ACKs a's delivery on b.
    const receipt = await b.ack(first);
    assert.equal(receipt.type, "ack", JSON.stringify(receipt));
    assert.equal(receipt.body.deduplicated, false);
    // a has room again: the third result comes to it now, not in 60 s.
    const third = await a.nextOfType("event.deliver", 10000);
    assert.equal(third.body.event.sequence, String(BigInt(first.body.event.sequence) + 2n));
  });
});

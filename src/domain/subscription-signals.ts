// Wakes this node's event connections of a subscription when a call on this node made
// deliveries claimable without a new result: resuming it (`:configure` with enabled=true)
// or re-opening an EXPIRED delivery (`:retry`). A new result wakes connections through the
// sequencer and the head poll; these two change no head, so a connected consumer would hear
// of them only at its next ping (15 s, docs/protocol.md §7) or its connection's recheck
// (the lease duration, 30 s by default). Connections on other nodes still learn that way:
// there is no cross-node signal (what a node decides is decided in the database).
export class SubscriptionSignals {
  private readonly listeners = new Set<(subscriptionId: string) => void>();

  /** Called with a subscription whose deliveries may have become claimable. */
  on(listener: (subscriptionId: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  notify(subscriptionId: string): void {
    for (const l of this.listeners) l(subscriptionId);
  }
}

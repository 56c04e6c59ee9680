-- One index for every read by state instead of two: deliveries_claim (subscription_id,
-- state, sequence), for the claimable rows in sequence order and the backlog counts, and
-- deliveries_expiry (subscription_id, state, lease_until, session_id), for the expired
-- leases and each connection's held count. Every lease, ACK and recovery changes state, so
-- with both it rewrites an entry in each. A PENDING delivery never has a lease_until
-- (materialising leaves it NULL, recovery and manual retry set it NULL), so under
-- (subscription_id, 'PENDING', NULL) the entries are in sequence order: the claimable rows,
-- read with `lease_until IS NULL`, still come in index order, no sort (EXPLAIN: ref on the
-- three key parts, no filesort), and the expired leases are still one range. One entry
-- fewer rewritten per lease, ACK and recovery (bench/README.md).
-- Applied once deliveries_state exists (the ALTER is atomic: its drops too).
-- applied-when: SELECT EXISTS (SELECT 1 FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = 'deliveries' AND index_name = 'deliveries_state' GROUP BY index_name HAVING GROUP_CONCAT(column_name ORDER BY seq_in_index) = 'subscription_id,state,lease_until,sequence,session_id')
ALTER TABLE deliveries
  DROP INDEX deliveries_claim,
  DROP INDEX deliveries_expiry,
  ADD INDEX deliveries_state (subscription_id, state, lease_until, sequence, session_id);

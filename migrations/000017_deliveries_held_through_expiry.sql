-- A connection's held count (capacity) needs no index of its own. With deliveries_session
-- (session_id, state), each lease writes an entry and each ACK or recovery moves it
-- again; every one of them also rewrites deliveries_expiry, because state and
-- lease_until change with it. With session_id at the end of deliveries_expiry, the
-- claim counts the held leases of its connections from the subscription's LEASED entries
-- (at most max_pending <= 1000), reading the index alone (src/db/queries/subscriptions.ts).
-- Applied once deliveries_expiry ends in session_id (the ALTER is atomic: its drops too).
-- applied-when: SELECT EXISTS (SELECT 1 FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = 'deliveries' AND index_name = 'deliveries_expiry' GROUP BY index_name HAVING GROUP_CONCAT(column_name ORDER BY seq_in_index) = 'subscription_id,state,lease_until,session_id')
ALTER TABLE deliveries
  DROP INDEX deliveries_session,
  DROP INDEX deliveries_expiry,
  ADD INDEX deliveries_expiry (subscription_id, state, lease_until, session_id);

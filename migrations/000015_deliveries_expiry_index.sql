-- Lease recovery scans only the expired leases of a subscription: (subscription_id,
-- state, lease_until). Through the claim index it would walk every LEASED row and wait
-- on the row locks of ACKs in flight. (Plain ADD INDEX: MySQL 8 has no IF NOT EXISTS here.)
-- Applied once deliveries_expiry exists with these three columns (000017 widens it).
-- applied-when: SELECT EXISTS (SELECT 1 FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = 'deliveries' AND index_name = 'deliveries_expiry' GROUP BY index_name HAVING GROUP_CONCAT(column_name ORDER BY seq_in_index) = 'subscription_id,state,lease_until')
ALTER TABLE deliveries ADD INDEX deliveries_expiry (subscription_id, state, lease_until);

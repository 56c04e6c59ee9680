-- Lease recovery scans only the expired leases of a subscription: (subscription_id,
-- state, lease_until). Through the claim index it walked every LEASED row and waited on
-- the row locks of ACKs in flight. (Plain ADD INDEX: MySQL 8 has no IF NOT EXISTS here.)
ALTER TABLE deliveries ADD INDEX deliveries_expiry (subscription_id, state, lease_until);

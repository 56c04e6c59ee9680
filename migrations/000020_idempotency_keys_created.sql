-- Receipts expire by age (domain/housekeeping.ts: ORBIT_RECEIPT_RETENTION): an index on
-- created_at makes each batch of the sweep a range read of the oldest keys instead of a
-- scan of the table.
-- applied-when: SELECT EXISTS (SELECT 1 FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = 'idempotency_keys' AND index_name = 'idempotency_keys_created')
ALTER TABLE idempotency_keys ADD INDEX idempotency_keys_created (created_at);

-- Listing deliveries by state needs no index of its own. With it, every lease and every
-- ACK rewrites an entry of (subscription_id, state, created_at, id), the widest index
-- holding state; without it the drain is faster and MariaDB uses less CPU (bench/README.md).
-- A page of ACKED deliveries reads deliveries_listing and passes over the backlog (at
-- most max_pending <= 1000 rows); a page of PENDING, LEASED or EXPIRED reads those rows
-- through deliveries_claim, and they are the backlog itself (src/db/queries/deliveries.ts).
-- Applied once deliveries_listing_state is gone.
-- applied-when: SELECT NOT EXISTS (SELECT 1 FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = 'deliveries' AND index_name = 'deliveries_listing_state')
ALTER TABLE deliveries DROP INDEX deliveries_listing_state;

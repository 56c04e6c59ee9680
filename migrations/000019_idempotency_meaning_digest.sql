-- The digest of what a request means (defaults applied, lists normalised), beside the
-- digest of the body as sent, for the writes whose replays compare meaning (a
-- subscription's create, a delivery's :retry: docs/http.md). request_digest keeps the body
-- as sent, so a node of an earlier version still answers a byte-identical replay during a
-- rolling deploy; NULL for the other writes and for keys stored before this column.
-- applied-when: SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = 'idempotency_keys' AND column_name = 'meaning_digest')
ALTER TABLE idempotency_keys ADD COLUMN meaning_digest BINARY(32) NULL AFTER request_digest;

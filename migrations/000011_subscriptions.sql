-- Result subscriptions (docs/protocol.md §2-3), bound forever to the credential that created them
-- and to one queue. revision is the configuration revision: only configure bumps it.
-- cursor_sequence: how far the result log has been scanned and deliveries created.
-- pending_count is not stored: it is counted from deliveries (at most max_pending + the
-- retried ones), so ACKs never contend on the subscription row.
CREATE TABLE IF NOT EXISTS subscriptions (
  id              CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  namespace_id    CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  application_id  CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  credential_id   CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  queue_id        CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  name            VARCHAR(128)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  revision        BIGINT UNSIGNED NOT NULL,
  enabled         BOOLEAN         NOT NULL,
  types           VARCHAR(128)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  cursor_sequence BIGINT UNSIGNED NOT NULL,
  max_pending     INT UNSIGNED    NOT NULL,
  max_attempts    INT UNSIGNED    NOT NULL,
  created_at      DATETIME(3)     NOT NULL,
  updated_at      DATETIME(3)     NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY subscriptions_name (namespace_id, name),
  KEY subscriptions_owner (credential_id, queue_id, created_at, id),
  CONSTRAINT subscriptions_credential FOREIGN KEY (credential_id) REFERENCES credentials (id),
  CONSTRAINT subscriptions_queue FOREIGN KEY (queue_id) REFERENCES queues (id)
) ENGINE = InnoDB;

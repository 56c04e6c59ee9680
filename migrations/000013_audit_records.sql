-- Audit of operations on subscriptions and deliveries (docs/protocol.md §3-4, §6): who
-- (credential), when, what (action and its arguments as JSON text), why (reason), and
-- the revisions before and after. Configure, retry and the first valid ACK write one.
CREATE TABLE IF NOT EXISTS audit_records (
  id              CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  namespace_id    CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  credential_id   CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  subscription_id CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  delivery_id     CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NULL,
  action          VARCHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  details         TEXT            CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  reason          TEXT            CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  revision_before BIGINT UNSIGNED NOT NULL,
  revision_after  BIGINT UNSIGNED NOT NULL,
  created_at      DATETIME(3)     NOT NULL,
  PRIMARY KEY (id),
  KEY audit_subscription (subscription_id, created_at),
  KEY audit_delivery (delivery_id)
) ENGINE = InnoDB;

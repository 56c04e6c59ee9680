-- Idempotency of management writes (docs/protocol.md §1-2): a key is scoped to
-- (credential, operation kind). The row is inserted first in the write's own
-- transaction, so a concurrent request with the same key waits on it and then replays;
-- request_digest is SHA-256 of the canonical content; response_data is the original
-- receipt's `data` as JSON text, returned as-is on replay.
CREATE TABLE IF NOT EXISTS idempotency_keys (
  credential_id   CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  operation       VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  idem_key        VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  request_digest  BINARY(32)   NOT NULL,
  response_status SMALLINT UNSIGNED NULL,
  response_data   MEDIUMTEXT   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  created_at      DATETIME(3)  NOT NULL,
  PRIMARY KEY (credential_id, operation, idem_key)
) ENGINE = InnoDB;

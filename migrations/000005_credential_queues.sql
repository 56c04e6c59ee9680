-- A credential's queue scope: the queues it was created for. Anything outside it is
-- NOT_FOUND to that credential (docs/tasks.md).
CREATE TABLE IF NOT EXISTS credential_queues (
  credential_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  queue_id      CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  PRIMARY KEY (credential_id, queue_id),
  KEY credential_queues_queue (queue_id),
  CONSTRAINT credential_queues_credential FOREIGN KEY (credential_id) REFERENCES credentials (id),
  CONSTRAINT credential_queues_queue FOREIGN KEY (queue_id) REFERENCES queues (id)
) ENGINE = InnoDB;

-- Tasks (docs/tasks.md). input and result are the exact JSON text the client sent, so
-- numbers keep their precision. current_attempt_id / lease_until describe the running
-- attempt; queued_at orders claims (oldest first, requeued tasks go to the back).
CREATE TABLE IF NOT EXISTS tasks (
  id                 CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  namespace_id       CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  queue_id           CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  state              ENUM('QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'NEEDS_REVIEW') NOT NULL,
  revision           BIGINT UNSIGNED NOT NULL,
  attempts           INT UNSIGNED NOT NULL,
  max_attempts       INT UNSIGNED NOT NULL,
  effect_uncertain   BOOLEAN     NOT NULL,
  input              MEDIUMTEXT  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  result             MEDIUMTEXT  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  current_attempt_id CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NULL,
  lease_until        DATETIME(3) NULL,
  queued_at          DATETIME(3) NULL,
  created_at         DATETIME(3) NOT NULL,
  updated_at         DATETIME(3) NOT NULL,
  PRIMARY KEY (id),
  KEY tasks_claim (queue_id, state, queued_at, id),
  KEY tasks_lease (state, lease_until),
  CONSTRAINT tasks_queue FOREIGN KEY (queue_id) REFERENCES queues (id)
) ENGINE = InnoDB;

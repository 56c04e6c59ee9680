-- One row per claim of a task. ended_by records the call that ended the attempt
-- (complete / requeue) with its canonical body, so that repeating exactly that call on
-- the now stale attempt answers 200 and writes nothing (docs/tasks.md).
CREATE TABLE IF NOT EXISTS task_attempts (
  id          CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  task_id     CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  number      INT UNSIGNED NOT NULL,
  started_at  DATETIME(3) NOT NULL,
  lease_until DATETIME(3) NOT NULL,
  ended_at    DATETIME(3) NULL,
  ended_by    VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NULL,
  end_body    MEDIUMTEXT  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  PRIMARY KEY (id),
  UNIQUE KEY task_attempts_number (task_id, number),
  CONSTRAINT task_attempts_task FOREIGN KEY (task_id) REFERENCES tasks (id)
) ENGINE = InnoDB;

-- The result log (docs/tasks.md; the event shape of docs/protocol.md §6). A task transition
-- inserts its event in the same transaction, with sequence NULL; the sequencer then numbers
-- committed events in one short transaction per batch (see domain/result-log.ts), so
-- producers never serialise on a per-namespace lock held through their commit. ticket is
-- only the physical insert order. details and snapshot are JSON text.
CREATE TABLE IF NOT EXISTS result_events (
  ticket             BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  id                 CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  namespace_id       CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  queue_id           CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  sequence           BIGINT UNSIGNED NULL,
  type               VARCHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  aggregate_id       CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  aggregate_revision BIGINT UNSIGNED NOT NULL,
  occurred_at        DATETIME(3)     NOT NULL,
  details            TEXT            CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  snapshot           MEDIUMTEXT      CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  PRIMARY KEY (ticket),
  UNIQUE KEY result_events_id (id),
  UNIQUE KEY result_events_sequence (namespace_id, sequence),
  KEY result_events_queue (namespace_id, queue_id, sequence),
  KEY result_events_unsequenced (sequence, namespace_id),
  KEY result_events_task (aggregate_id)
) ENGINE = InnoDB;

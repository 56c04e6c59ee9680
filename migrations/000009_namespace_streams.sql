-- One result stream per namespace. head_sequence is the committed stream head: every
-- event with sequence <= head_sequence is committed and visible. Only the sequencer
-- moves it, in the same transaction that numbers events. retention_boundary: events
-- with sequence <= it were purged; the retained log starts at retention_boundary + 1.
CREATE TABLE IF NOT EXISTS namespace_streams (
  namespace_id       CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  head_sequence      BIGINT UNSIGNED NOT NULL,
  retention_boundary BIGINT UNSIGNED NOT NULL,
  updated_at         DATETIME(3)     NOT NULL,
  PRIMARY KEY (namespace_id),
  CONSTRAINT namespace_streams_namespace FOREIGN KEY (namespace_id) REFERENCES namespaces (id)
) ENGINE = InnoDB;

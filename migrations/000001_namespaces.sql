-- A namespace: the outermost scope. Applications and queues live in one; each has one
-- result stream (docs/tasks.md). Names are unique and compared byte for byte.
CREATE TABLE IF NOT EXISTS namespaces (
  id         CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  name       VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_at DATETIME(3)  NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY namespaces_name (name)
) ENGINE = InnoDB;

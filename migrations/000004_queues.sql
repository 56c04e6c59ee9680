-- A queue: created by an operator (`orbit bootstrap`), unique by name in its namespace.
CREATE TABLE IF NOT EXISTS queues (
  id           CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  namespace_id CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  name         VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_at   DATETIME(3)  NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY queues_namespace_name (namespace_id, name),
  CONSTRAINT queues_namespace FOREIGN KEY (namespace_id) REFERENCES namespaces (id)
) ENGINE = InnoDB;

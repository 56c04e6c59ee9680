-- An application owns credentials; the claim pool rotates fairly between applications.
CREATE TABLE IF NOT EXISTS applications (
  id           CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  namespace_id CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  name         VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_at   DATETIME(3)  NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY applications_namespace_name (namespace_id, name),
  CONSTRAINT applications_namespace FOREIGN KEY (namespace_id) REFERENCES namespaces (id)
) ENGINE = InnoDB;

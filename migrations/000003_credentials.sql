-- A credential: the caller of every request. Only the SHA-256 digest of the 32-byte
-- secret is stored; the token is shown once by `orbit bootstrap`. A revoked credential
-- authenticates nothing (401), but its rows stay for the audit trail.
CREATE TABLE IF NOT EXISTS credentials (
  id             CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  namespace_id   CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  application_id CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  secret_digest  BINARY(32)  NOT NULL,
  actions        SET('tasks:submit', 'tasks:read', 'tasks:cancel', 'tasks:work', 'tasks:review',
                     'events:manage', 'events:read', 'events:consume') NOT NULL,
  created_at     DATETIME(3) NOT NULL,
  revoked_at     DATETIME(3) NULL,
  PRIMARY KEY (id),
  KEY credentials_application (application_id),
  CONSTRAINT credentials_namespace FOREIGN KEY (namespace_id) REFERENCES namespaces (id),
  CONSTRAINT credentials_application FOREIGN KEY (application_id) REFERENCES applications (id)
) ENGINE = InnoDB;

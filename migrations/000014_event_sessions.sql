-- Event connections (docs/protocol.md §5): one row per bound WebSocket session, with the capacity
-- its hello declared. Claims count a session's LEASED deliveries against this capacity
-- inside their transaction. A closed session keeps its row and its leases: leases are
-- recovered by later claims, never deleted on disconnect.
CREATE TABLE IF NOT EXISTS event_sessions (
  id              CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  subscription_id CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  credential_id   CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  capacity        INT UNSIGNED NOT NULL,
  node_id         CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  opened_at       DATETIME(3)  NOT NULL,
  closed_at       DATETIME(3)  NULL,
  PRIMARY KEY (id),
  KEY event_sessions_subscription (subscription_id, closed_at)
) ENGINE = InnoDB;

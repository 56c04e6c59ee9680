-- One delivery per (subscription, event): its id never changes across re-sends
-- (docs/protocol.md §4). lease_secret_digest is SHA-256 of the 32-byte secret sent once in
-- event.deliver; it is kept after the ACK so that a replayed ACK with the same proof is
-- recognised. session_id binds a lease to the event connection that holds it (capacity).
CREATE TABLE IF NOT EXISTS deliveries (
  id                  CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  subscription_id     CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  event_id            CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  sequence            BIGINT UNSIGNED NOT NULL,
  revision            BIGINT UNSIGNED NOT NULL,
  state               ENUM('PENDING', 'LEASED', 'ACKED', 'EXPIRED') NOT NULL,
  created_at          DATETIME(3)     NOT NULL,
  available_at        DATETIME(3)     NOT NULL,
  lease_epoch         BIGINT UNSIGNED NOT NULL,
  lease_until         DATETIME(3)     NULL,
  lease_secret_digest BINARY(32)      NULL,
  session_id          CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NULL,
  attempts            INT UNSIGNED    NOT NULL,
  attempt_budget      INT UNSIGNED    NOT NULL,
  acknowledged_at     DATETIME(3)     NULL,
  PRIMARY KEY (id),
  UNIQUE KEY deliveries_event (subscription_id, event_id),
  KEY deliveries_claim (subscription_id, state, sequence),
  KEY deliveries_listing (subscription_id, created_at, id),
  KEY deliveries_listing_state (subscription_id, state, created_at, id),
  KEY deliveries_session (session_id, state),
  KEY deliveries_event_id (event_id),
  CONSTRAINT deliveries_subscription FOREIGN KEY (subscription_id) REFERENCES subscriptions (id)
) ENGINE = InnoDB;

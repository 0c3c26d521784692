-- One row per running relay on the outbox table: the relay writes it when it
-- starts and every few seconds after (RelayConfig.Heartbeat), and deletes it
-- when it stops cleanly. last_seen is the database clock, so ferry status can
-- tell which relays are alive now without trusting any host's clock. A
-- killed relay's row stays, ageing, until a relay prunes it (after a day by
-- default). The relay never reads the outbox through this table, and a beat
-- is one statement on one row of it.
CREATE TABLE IF NOT EXISTS {{.RelayTable}} (
  relay_id         VARCHAR(128) NOT NULL,
  host             VARCHAR(255) NOT NULL DEFAULT '',
  pid              BIGINT       NOT NULL DEFAULT 0,
  version          VARCHAR(128) NOT NULL DEFAULT '',
  broker           VARCHAR(255) NOT NULL DEFAULT '',
  broker_connected BOOLEAN      NOT NULL DEFAULT FALSE,
  broker_error     VARCHAR(512) NOT NULL DEFAULT '',
  lanes            INT          NOT NULL DEFAULT 0,
  ordered          BOOLEAN      NOT NULL DEFAULT FALSE,
  in_flight        BIGINT       NOT NULL DEFAULT 0,
  sent             BIGINT       NOT NULL DEFAULT 0,
  sent_last_minute BIGINT       NOT NULL DEFAULT 0,
  started_at       DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  last_seen        DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (relay_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- One row per running relay on the outbox table: the relay writes it when it
-- starts and every few seconds after (RelayConfig.Heartbeat), and deletes it
-- when it stops cleanly. last_seen is the database clock, so ferry status can
-- tell which relays are alive now without trusting any host's clock. A
-- killed relay's row stays, ageing, until a relay prunes it (after a day by
-- default). The relay never reads the outbox through this table, and a beat
-- is one statement on one row of it.
CREATE TABLE IF NOT EXISTS {{.RelayTable}} (
  relay_id         varchar(128) NOT NULL PRIMARY KEY,
  host             varchar(255) NOT NULL DEFAULT '',
  pid              bigint       NOT NULL DEFAULT 0,
  version          varchar(128) NOT NULL DEFAULT '',
  broker           varchar(255) NOT NULL DEFAULT '',
  broker_connected boolean      NOT NULL DEFAULT false,
  broker_error     varchar(512) NOT NULL DEFAULT '',
  lanes            integer      NOT NULL DEFAULT 0,
  ordered          boolean      NOT NULL DEFAULT false,
  in_flight        bigint       NOT NULL DEFAULT 0,
  sent             bigint       NOT NULL DEFAULT 0,
  sent_last_minute bigint       NOT NULL DEFAULT 0,
  started_at       timestamptz  NOT NULL DEFAULT now(),
  last_seen        timestamptz  NOT NULL DEFAULT now()
);

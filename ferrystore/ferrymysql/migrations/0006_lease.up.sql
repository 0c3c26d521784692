-- One lease table for every lease of the outbox table, one row each by name:
-- 'maintenance', held by the relay that sweeps expired claims, returns the
-- claims of relays found dead and prunes their heartbeat rows; 'log', held by
-- the relay that reads the table's changes from the binlog, whose position is
-- the log's checkpoint. The holder (owner) keeps the lease until lease_until
-- by the database clock, renewing it; another takes the row over once it
-- ends. Each write is one statement on one row.
CREATE TABLE IF NOT EXISTS {{.LeaseTable}} (
  name        VARCHAR(64)   NOT NULL,
  owner       VARCHAR(128)  NOT NULL DEFAULT '',
  source      VARCHAR(255)  NOT NULL DEFAULT '',
  position    VARCHAR(1024) NOT NULL DEFAULT '',
  lease_until DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  saved_at    DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
-- The log relay's checkpoint and lease move in as the lease 'log'. Stop log
-- relays older than this migration first: they read <table>_log, dropped
-- below. Polling relays keep running.
INSERT IGNORE INTO {{.LeaseTable}} (name, owner, source, position, lease_until, saved_at)
  SELECT 'log', owner, source, position, lease_until, saved_at FROM {{.LogTable}} WHERE id = 1;
-- Each relay's heartbeat row names the prefix of its claim tokens, so that
-- the claims of a relay found dead are returned at once. A column with a
-- default is added in place: relays keep beating during the migration.
ALTER TABLE {{.RelayTable}} ADD COLUMN claims VARCHAR(32) NOT NULL DEFAULT '';
DROP TABLE IF EXISTS {{.LogTable}};

-- One lease table for every lease of the outbox table, one row each by name:
-- 'maintenance', held by the relay that sweeps expired claims, returns the
-- claims of relays found dead and prunes their heartbeat rows; 'log', held by
-- the relay that reads the table's changes from logical replication, whose
-- position (LSN) is the log's checkpoint. The holder (owner) keeps the lease
-- until lease_until by the database clock, renewing it; another takes the row
-- over once it ends. Each write is one statement on one row.
CREATE TABLE IF NOT EXISTS {{.LeaseTable}} (
  name        varchar(64)   NOT NULL PRIMARY KEY,
  owner       varchar(128)  NOT NULL DEFAULT '',
  source      varchar(255)  NOT NULL DEFAULT '',
  position    varchar(1024) NOT NULL DEFAULT '',
  lease_until timestamptz   NOT NULL DEFAULT now(),
  saved_at    timestamptz   NOT NULL DEFAULT now()
);
-- The log relay's checkpoint and lease move in as the lease 'log'. Stop log
-- relays older than this migration first: they read <table>_log, dropped
-- below. Polling relays keep running.
INSERT INTO {{.LeaseTable}} (name, owner, source, position, lease_until, saved_at)
  SELECT 'log', owner, source, position, lease_until, saved_at FROM {{.LogTable}} WHERE id = 1
  ON CONFLICT (name) DO NOTHING;
-- Each relay's heartbeat row names the prefix of its claim tokens, so that
-- the claims of a relay found dead are returned at once. A column with a
-- constant default is a catalog change: no rewrite of the table.
ALTER TABLE {{.RelayTable}} ADD COLUMN IF NOT EXISTS claims varchar(32) NOT NULL DEFAULT '';
DROP TABLE IF EXISTS {{.LogTable}};

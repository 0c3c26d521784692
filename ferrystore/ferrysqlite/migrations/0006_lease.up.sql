-- One lease table for every lease of the outbox table, one row each by name:
-- 'maintenance', held by the relay that sweeps expired claims, returns the
-- claims of relays found dead and prunes their heartbeat rows. (SQLite has no
-- change log a relay reads, so no relay takes the lease 'log' here; the table
-- is the same in every store.) The holder (owner) keeps the lease until
-- lease_until by the database clock, renewing it; another takes the row over
-- once it ends.
CREATE TABLE IF NOT EXISTS {{.LeaseTable}} (
  name        TEXT NOT NULL PRIMARY KEY,
  owner       TEXT NOT NULL DEFAULT '',
  source      TEXT NOT NULL DEFAULT '',
  position    TEXT NOT NULL DEFAULT '',
  lease_until TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  saved_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
INSERT OR IGNORE INTO {{.LeaseTable}} (name, owner, source, position, lease_until, saved_at)
  SELECT 'log', owner, source, position, lease_until, saved_at FROM {{.LogTable}} WHERE id = 1;
-- Each relay's heartbeat row names the prefix of its claim tokens, so that
-- the claims of a relay found dead are returned at once.
ALTER TABLE {{.RelayTable}} ADD COLUMN claims TEXT NOT NULL DEFAULT '';
DROP TABLE IF EXISTS {{.LogTable}};

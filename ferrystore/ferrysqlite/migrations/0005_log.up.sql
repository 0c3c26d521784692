-- The log relay's checkpoint and lease: SQLite has no change log a relay
-- reads, so no relay writes this table; it exists so that every store has
-- the same tables and ferry status reads them the same way.
CREATE TABLE IF NOT EXISTS {{.LogTable}} (
  id          INTEGER NOT NULL PRIMARY KEY,
  source      TEXT    NOT NULL DEFAULT '',
  position    TEXT    NOT NULL DEFAULT '',
  owner       TEXT    NOT NULL DEFAULT '',
  lease_until TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  saved_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
-- Each relay's heartbeat row says where it learns which events to publish:
-- 'table' (it polls), as every relay on SQLite does.
ALTER TABLE {{.RelayTable}} ADD COLUMN source TEXT NOT NULL DEFAULT '';

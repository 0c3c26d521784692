CREATE TABLE IF NOT EXISTS {{.LogTable}} (
  id          INTEGER NOT NULL PRIMARY KEY,
  source      TEXT    NOT NULL DEFAULT '',
  position    TEXT    NOT NULL DEFAULT '',
  owner       TEXT    NOT NULL DEFAULT '',
  lease_until TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  saved_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
INSERT OR IGNORE INTO {{.LogTable}} (id, source, position, owner, lease_until, saved_at)
  SELECT 1, source, position, owner, lease_until, saved_at FROM {{.LeaseTable}} WHERE name = 'log';
ALTER TABLE {{.RelayTable}} DROP COLUMN claims;
DROP TABLE IF EXISTS {{.LeaseTable}};

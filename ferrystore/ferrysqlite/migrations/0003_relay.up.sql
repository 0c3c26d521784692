-- One row per running relay on the outbox table: the relay writes it when it
-- starts and every few seconds after (RelayConfig.Heartbeat), and deletes it
-- when it stops cleanly. last_seen is the database clock (here: the clock of
-- the process running SQLite). A killed relay's row stays, ageing, until a
-- relay prunes it (after a day by default). The relay never reads the outbox
-- through this table, and a beat is one statement on one row of it.
CREATE TABLE IF NOT EXISTS {{.RelayTable}} (
  relay_id         TEXT    NOT NULL PRIMARY KEY,
  host             TEXT    NOT NULL DEFAULT '',
  pid              INTEGER NOT NULL DEFAULT 0,
  version          TEXT    NOT NULL DEFAULT '',
  broker           TEXT    NOT NULL DEFAULT '',
  broker_connected INTEGER NOT NULL DEFAULT 0,
  broker_error     TEXT    NOT NULL DEFAULT '',
  lanes            INTEGER NOT NULL DEFAULT 0,
  ordered          INTEGER NOT NULL DEFAULT 0,
  in_flight        INTEGER NOT NULL DEFAULT 0,
  sent             INTEGER NOT NULL DEFAULT 0,
  sent_last_minute INTEGER NOT NULL DEFAULT 0,
  started_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  last_seen        TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

-- The outbox table: the seed schema's outbox_event in SQLite types. Times
-- are UTC text, 'YYYY-MM-DD HH:MM:SS.SSS', which sorts as it compares.
CREATE TABLE IF NOT EXISTS {{.Table}} (
  event_id       TEXT    NOT NULL PRIMARY KEY,
  aggregate_type TEXT    NOT NULL DEFAULT '',
  aggregate_id   TEXT    NOT NULL,
  aggregate_seq  INTEGER NOT NULL DEFAULT 0,
  event_type     TEXT    NOT NULL,
  payload        TEXT    NOT NULL CHECK (json_valid(payload)),
  headers        TEXT    NULL,
  destination    TEXT    NOT NULL DEFAULT '',
  exchange       TEXT    NOT NULL DEFAULT '',
  status         TEXT    NOT NULL DEFAULT 'NEW',
  attempts       INTEGER NOT NULL DEFAULT 0,
  available_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  lease_token    TEXT    NULL,
  locked_until   TEXT    NULL,
  created_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  sent_at        TEXT    NULL,
  last_error     TEXT    NULL
);
-- claims, sweeps and purges scan this index by status
CREATE INDEX IF NOT EXISTS {{.PendingIndex}} ON {{.Table}} (status, available_at, event_id);
-- ordered claims look up an aggregate's earlier events here
CREATE INDEX IF NOT EXISTS {{.AggregateIndex}} ON {{.Table}} (aggregate_type, aggregate_id, aggregate_seq);
-- The last sequence number given to each aggregate.
CREATE TABLE IF NOT EXISTS {{.SeqTable}} (
  aggregate_type TEXT    NOT NULL,
  aggregate_id   TEXT    NOT NULL,
  last_seq       INTEGER NOT NULL,
  PRIMARY KEY (aggregate_type, aggregate_id)
);

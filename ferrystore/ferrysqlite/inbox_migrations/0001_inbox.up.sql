-- Markers: one row per (consumer, business operation) applied. The primary
-- key is what arbitrates concurrent deliveries of one operation.
CREATE TABLE IF NOT EXISTS {{.Markers}} (
  consumer_name TEXT NOT NULL,
  business_key  TEXT NOT NULL,
  event_id      TEXT NOT NULL,
  fields        TEXT NOT NULL CHECK (json_valid(fields)),
  fingerprint   TEXT NOT NULL,
  outcome       TEXT NOT NULL DEFAULT 'applied',
  created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  PRIMARY KEY (consumer_name, business_key)
);
-- retention purges scan this index
CREATE INDEX IF NOT EXISTS {{.MarkersCreatedIndex}} ON {{.Markers}} (created_at);

-- Conflicts: a business key delivered again with other defining fields.
CREATE TABLE IF NOT EXISTS {{.Conflicts}} (
  id                   INTEGER PRIMARY KEY AUTOINCREMENT,
  consumer_name        TEXT    NOT NULL,
  business_key         TEXT    NOT NULL,
  stored_event_id      TEXT    NOT NULL,
  stored_fields        TEXT    NOT NULL,
  stored_fingerprint   TEXT    NOT NULL,
  incoming_event_id    TEXT    NOT NULL,
  incoming_fields      TEXT    NOT NULL,
  incoming_fingerprint TEXT    NOT NULL,
  occurrences          INTEGER NOT NULL DEFAULT 1,
  first_seen           TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  last_seen            TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  status               TEXT    NOT NULL DEFAULT 'OPEN',
  decision             TEXT    NULL,
  resolved_by          TEXT    NULL,
  note                 TEXT    NULL,
  resolved_at          TEXT    NULL,
  UNIQUE (consumer_name, business_key, incoming_fingerprint)
);
CREATE INDEX IF NOT EXISTS {{.ConflictsStatusIndex}} ON {{.Conflicts}} (status, id);

-- Versions: the newest version applied per (consumer, aggregate), for the
-- order guard.
CREATE TABLE IF NOT EXISTS {{.Versions}} (
  consumer_name TEXT    NOT NULL,
  aggregate     TEXT    NOT NULL,
  version       INTEGER NOT NULL,
  PRIMARY KEY (consumer_name, aggregate)
);

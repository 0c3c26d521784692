-- Idempotency keys (ferryhttp): one row per request key within its scope,
-- claimed by the first request with a lease, completed with the stored
-- response in that request's business transaction.
CREATE TABLE IF NOT EXISTS {{.Keys}} (
  key_hash     TEXT    NOT NULL PRIMARY KEY,
  principal    TEXT    NOT NULL,
  method       TEXT    NOT NULL,
  route        TEXT    NOT NULL,
  idem_key     TEXT    NOT NULL,
  fingerprint  TEXT    NOT NULL,
  state        TEXT    NOT NULL,
  lease_token  TEXT    NOT NULL,
  locked_until TEXT    NOT NULL,
  takeovers    INTEGER NOT NULL DEFAULT 0,
  status_code  INTEGER NULL,
  resp_headers TEXT    NULL,
  resp_body    BLOB    NULL,
  created_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  completed_at TEXT    NULL,
  expires_at   TEXT    NOT NULL
);
-- retention purges scan this index
CREATE INDEX IF NOT EXISTS {{.KeysExpiresIndex}} ON {{.Keys}} (expires_at);

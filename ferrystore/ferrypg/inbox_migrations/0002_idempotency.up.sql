-- Idempotency keys (ferryhttp): one row per request key within its scope,
-- claimed by the first request with a lease, completed with the stored
-- response in that request's business transaction.
CREATE TABLE IF NOT EXISTS {{.Keys}} (
  key_hash     char(64)     PRIMARY KEY,
  principal    varchar(255) NOT NULL,
  method       varchar(16)  NOT NULL,
  route        varchar(255) NOT NULL,
  idem_key     varchar(255) NOT NULL,
  fingerprint  char(64)     NOT NULL,
  state        varchar(16)  NOT NULL,
  lease_token  varchar(64)  NOT NULL,
  locked_until timestamptz  NOT NULL,
  takeovers    bigint       NOT NULL DEFAULT 0,
  status_code  integer      NULL,
  resp_headers text         NULL,
  resp_body    bytea        NULL,
  created_at   timestamptz  NOT NULL DEFAULT now(),
  completed_at timestamptz  NULL,
  expires_at   timestamptz  NOT NULL
);
-- retention purges scan this index
CREATE INDEX IF NOT EXISTS {{.KeysExpiresIndex}} ON {{.Keys}} (expires_at);

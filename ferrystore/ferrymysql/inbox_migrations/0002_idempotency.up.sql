-- Idempotency keys (ferryhttp): one row per request key within its scope,
-- claimed by the first request with a lease, completed with the stored
-- response in that request's business transaction.
CREATE TABLE IF NOT EXISTS {{.Keys}} (
  key_hash     CHAR(64)     NOT NULL,
  principal    VARCHAR(255) NOT NULL,
  method       VARCHAR(16)  NOT NULL,
  route        VARCHAR(255) NOT NULL,
  idem_key     VARCHAR(255) NOT NULL,
  fingerprint  CHAR(64)     NOT NULL,
  state        VARCHAR(16)  NOT NULL,
  lease_token  VARCHAR(64)  NOT NULL,
  locked_until DATETIME(6)  NOT NULL,
  takeovers    BIGINT       NOT NULL DEFAULT 0,
  status_code  INT          NULL,
  resp_headers TEXT         NULL,
  resp_body    LONGBLOB     NULL,
  created_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  completed_at DATETIME(6)  NULL,
  expires_at   DATETIME(6)  NOT NULL,
  PRIMARY KEY (key_hash),
  -- retention purges scan this index
  KEY idx_expires (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

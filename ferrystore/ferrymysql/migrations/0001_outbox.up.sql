-- The outbox table. Its first columns and idx_pending are the seed schema's
-- outbox_event; every added column has a default, so a hand-written
-- INSERT of the seed's columns works unchanged.
CREATE TABLE IF NOT EXISTS {{.Table}} (
  event_id       VARCHAR(64)  NOT NULL,
  aggregate_type VARCHAR(64)  NOT NULL DEFAULT '',
  aggregate_id   VARCHAR(128) NOT NULL,
  aggregate_seq  BIGINT       NOT NULL DEFAULT 0,
  event_type     VARCHAR(64)  NOT NULL,
  payload        JSON         NOT NULL,
  headers        JSON         NULL,
  destination    VARCHAR(255) NOT NULL DEFAULT '',
  exchange       VARCHAR(255) NOT NULL DEFAULT '',
  status         VARCHAR(16)  NOT NULL DEFAULT 'NEW',
  attempts       INT          NOT NULL DEFAULT 0,
  available_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  lease_token    VARCHAR(64)  NULL,
  locked_until   DATETIME(6)  NULL,
  created_at     DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  sent_at        DATETIME(6)  NULL,
  last_error     TEXT         NULL,
  PRIMARY KEY (event_id),
  -- claims, sweeps and purges scan this index by status
  KEY idx_pending (status, available_at, event_id),
  -- ordered claims look up an aggregate's earlier events here
  KEY idx_aggregate (aggregate_type, aggregate_id, aggregate_seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The last sequence number given to each aggregate. Enqueue increments it in
-- the caller's transaction, which serialises enqueues of one aggregate.
CREATE TABLE IF NOT EXISTS {{.SeqTable}} (
  aggregate_type VARCHAR(64)  NOT NULL,
  aggregate_id   VARCHAR(128) NOT NULL,
  last_seq       BIGINT       NOT NULL,
  PRIMARY KEY (aggregate_type, aggregate_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Markers: one row per (consumer, business operation) applied. The primary
-- key is what arbitrates concurrent deliveries of one operation.
CREATE TABLE IF NOT EXISTS {{.Markers}} (
  consumer_name VARCHAR(64)  NOT NULL,
  business_key  VARCHAR(128) NOT NULL,
  event_id      VARCHAR(64)  NOT NULL,
  fields        JSON         NOT NULL,
  fingerprint   CHAR(64)     NOT NULL,
  outcome       VARCHAR(16)  NOT NULL DEFAULT 'applied',
  created_at    DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (consumer_name, business_key),
  -- retention purges scan this index
  KEY idx_created (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Conflicts: a business key delivered again with other defining fields.
CREATE TABLE IF NOT EXISTS {{.Conflicts}} (
  id                   BIGINT       NOT NULL AUTO_INCREMENT,
  consumer_name        VARCHAR(64)  NOT NULL,
  business_key         VARCHAR(128) NOT NULL,
  stored_event_id      VARCHAR(64)  NOT NULL,
  stored_fields        JSON         NOT NULL,
  stored_fingerprint   CHAR(64)     NOT NULL,
  incoming_event_id    VARCHAR(64)  NOT NULL,
  incoming_fields      JSON         NOT NULL,
  incoming_fingerprint CHAR(64)     NOT NULL,
  occurrences          BIGINT       NOT NULL DEFAULT 1,
  first_seen           DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  last_seen            DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  status               VARCHAR(16)  NOT NULL DEFAULT 'OPEN',
  decision             VARCHAR(32)  NULL,
  resolved_by          VARCHAR(128) NULL,
  note                 TEXT         NULL,
  resolved_at          DATETIME(6)  NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uq_incoming (consumer_name, business_key, incoming_fingerprint),
  KEY idx_status (status, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Versions: the newest version applied per (consumer, aggregate), for the
-- order guard.
CREATE TABLE IF NOT EXISTS {{.Versions}} (
  consumer_name VARCHAR(64)  NOT NULL,
  aggregate     VARCHAR(200) NOT NULL,
  version       BIGINT       NOT NULL,
  PRIMARY KEY (consumer_name, aggregate)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

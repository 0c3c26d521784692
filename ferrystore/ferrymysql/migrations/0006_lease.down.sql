CREATE TABLE IF NOT EXISTS {{.LogTable}} (
  id          INT           NOT NULL,
  source      VARCHAR(255)  NOT NULL DEFAULT '',
  position    VARCHAR(1024) NOT NULL DEFAULT '',
  owner       VARCHAR(128)  NOT NULL DEFAULT '',
  lease_until DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  saved_at    DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT IGNORE INTO {{.LogTable}} (id, source, position, owner, lease_until, saved_at)
  SELECT 1, source, position, owner, lease_until, saved_at FROM {{.LeaseTable}} WHERE name = 'log';
ALTER TABLE {{.RelayTable}} DROP COLUMN claims;
DROP TABLE IF EXISTS {{.LeaseTable}};

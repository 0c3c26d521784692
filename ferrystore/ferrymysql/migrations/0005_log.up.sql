-- The log relay's checkpoint and lease (ferry relay --source log): one row,
-- written by the relay that reads the table's changes from the binlog. It
-- holds the position up to which they were handled, and which relay reads
-- them (owner) until lease_until by the database clock; a standby takes the
-- row over once the lease ends. A polling relay never reads this table.
CREATE TABLE IF NOT EXISTS {{.LogTable}} (
  id          INT           NOT NULL,
  source      VARCHAR(255)  NOT NULL DEFAULT '',
  position    VARCHAR(1024) NOT NULL DEFAULT '',
  owner       VARCHAR(128)  NOT NULL DEFAULT '',
  lease_until DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  saved_at    DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
-- Each relay's heartbeat row says where it learns which events to publish:
-- 'table' (it polls) or 'log' (it reads the binlog, or stands by for it), so
-- that ferry status names the log relay's standbys. A column with a default
-- is added in place: relays keep beating during the migration.
ALTER TABLE {{.RelayTable}} ADD COLUMN source VARCHAR(16) NOT NULL DEFAULT '';

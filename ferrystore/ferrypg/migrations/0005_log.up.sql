-- The log relay's checkpoint and lease (ferry relay --source log): one row,
-- written by the relay that reads the table's changes from logical
-- replication. It holds the position (LSN) up to which they were handled,
-- and which relay reads them (owner) until lease_until by the database
-- clock; a standby takes the row over once the lease ends. A polling relay
-- never reads this table.
CREATE TABLE IF NOT EXISTS {{.LogTable}} (
  id          integer       NOT NULL PRIMARY KEY,
  source      varchar(255)  NOT NULL DEFAULT '',
  position    varchar(1024) NOT NULL DEFAULT '',
  owner       varchar(128)  NOT NULL DEFAULT '',
  lease_until timestamptz   NOT NULL DEFAULT now(),
  saved_at    timestamptz   NOT NULL DEFAULT now()
);
-- Each relay's heartbeat row says where it learns which events to publish:
-- 'table' (it polls) or 'log' (it reads logical replication, or stands by
-- for it), so that ferry status names the log relay's standbys.
ALTER TABLE {{.RelayTable}} ADD COLUMN source varchar(16) NOT NULL DEFAULT '';

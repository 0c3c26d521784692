CREATE TABLE IF NOT EXISTS {{.LogTable}} (
  id          integer       NOT NULL PRIMARY KEY,
  source      varchar(255)  NOT NULL DEFAULT '',
  position    varchar(1024) NOT NULL DEFAULT '',
  owner       varchar(128)  NOT NULL DEFAULT '',
  lease_until timestamptz   NOT NULL DEFAULT now(),
  saved_at    timestamptz   NOT NULL DEFAULT now()
);
INSERT INTO {{.LogTable}} (id, source, position, owner, lease_until, saved_at)
  SELECT 1, source, position, owner, lease_until, saved_at FROM {{.LeaseTable}} WHERE name = 'log'
  ON CONFLICT (id) DO NOTHING;
ALTER TABLE {{.RelayTable}} DROP COLUMN IF EXISTS claims;
DROP TABLE IF EXISTS {{.LeaseTable}};

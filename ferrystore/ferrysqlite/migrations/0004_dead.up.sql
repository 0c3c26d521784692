-- DEAD and DISCARDED events: error_class is the class of last_error
-- (ferryadmin.ErrorClass), written with it, so that DEAD events are grouped
-- by cause in the database; revived_at is when a person last retried the
-- event (ferry dead retry), from when it counts as pending again. The
-- partial indexes hold the DEAD and DISCARDED rows only.
ALTER TABLE {{.Table}} ADD COLUMN error_class TEXT NULL;
ALTER TABLE {{.Table}} ADD COLUMN revived_at TEXT NULL;
CREATE INDEX IF NOT EXISTS {{.SettledIndex}} ON {{.Table}} (status, created_at, event_id)
  WHERE status IN ('DEAD', 'DISCARDED');
CREATE INDEX IF NOT EXISTS {{.DeadIndex}} ON {{.Table}}
  (status, (CASE WHEN destination = '' THEN event_type ELSE destination END), error_class, event_type, created_at, event_id)
  WHERE status IN ('DEAD', 'DISCARDED');

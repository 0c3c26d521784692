-- DEAD and DISCARDED events at any number: the operator's listings, counts,
-- groups and bulk actions read indexes of their own instead of every row.
--
-- error_class is the class of last_error (ferryadmin.ErrorClass), written
-- with it, so that DEAD events are grouped by cause in the database;
-- revived_at is when a person last retried the event (ferry dead retry), from
-- when it counts as pending again. Nullable columns without a default: a
-- catalog change, no table rewrite.
ALTER TABLE {{.Table}}
  ADD COLUMN IF NOT EXISTS error_class varchar(200) NULL,
  ADD COLUMN IF NOT EXISTS revived_at  timestamptz  NULL;
-- Partial indexes: they hold the DEAD and DISCARDED rows only, so the claims
-- and marks, which move rows between NEW, SENDING and SENT, never touch
-- them. Building them reads the table under a lock that makes writers wait:
-- on a large table, create them first with CREATE INDEX CONCURRENTLY and the
-- same definitions (ferry migrate --print shows them), and ferry migrate
-- then finds them.
--
-- listings of DEAD or DISCARDED events, oldest first, and their counts
CREATE INDEX IF NOT EXISTS {{.SettledIndex}} ON {{.Table}} (status, created_at, event_id)
  WHERE status IN ('DEAD', 'DISCARDED');
-- their groups by destination, error class and type, a group's events oldest first
CREATE INDEX IF NOT EXISTS {{.DeadIndex}} ON {{.Table}}
  (status, (CASE WHEN destination = '' THEN event_type ELSE destination END), error_class, event_type, created_at, event_id)
  INCLUDE (destination) WHERE status IN ('DEAD', 'DISCARDED');

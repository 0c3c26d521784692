-- DEAD and DISCARDED events at any number: the operator's listings, counts,
-- groups and bulk actions read indexes of their own instead of every row.
--
-- error_class is the class of last_error (ferryadmin.ErrorClass), written
-- with it, so that DEAD events are grouped by cause in the database;
-- revived_at is when a person last retried the event (ferry dead retry), from
-- when it counts as pending again. route is where the event is published
-- (its destination, or its type) and settled_status its status when it is
-- DEAD or DISCARDED, NULL otherwise: virtual, computed, never stored. The
-- claims and marks move rows between NEW, SENDING and SENT only, which leave
-- settled_status NULL, so they never touch the two indexes; an enqueue adds
-- an entry to each. Nullable columns and virtual ones are added in place,
-- the indexes built online (ALGORITHM=INPLACE, LOCK=NONE): relays and
-- enqueues keep running during the migration.
ALTER TABLE {{.Table}}
  ADD COLUMN error_class    VARCHAR(200) NULL,
  ADD COLUMN revived_at     DATETIME(6)  NULL,
  ADD COLUMN route          VARCHAR(255) AS (CASE WHEN destination = '' THEN event_type ELSE destination END) VIRTUAL,
  ADD COLUMN settled_status VARCHAR(16)  AS (CASE WHEN status IN ('DEAD', 'DISCARDED') THEN status END) VIRTUAL;
-- listings of DEAD or DISCARDED events, oldest first, and their counts
ALTER TABLE {{.Table}} ADD KEY idx_settled (settled_status, created_at, event_id);
-- their groups by destination, error class and type, a group's events oldest first
ALTER TABLE {{.Table}} ADD KEY idx_dead (settled_status, route, error_class, event_type, created_at, event_id);

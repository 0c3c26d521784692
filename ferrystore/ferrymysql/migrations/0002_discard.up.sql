-- A DEAD event a person gave up on becomes DISCARDED (ferry dead discard)
-- instead of being deleted: the row stays as the record of that decision.
-- One statement, so it applies entirely or not at all; both columns are
-- NULL without a default, which MariaDB 10.3+ and MySQL 8 add instantly.
ALTER TABLE {{.Table}}
  ADD COLUMN discarded_at   DATETIME(6) NULL,
  ADD COLUMN discard_reason TEXT        NULL;

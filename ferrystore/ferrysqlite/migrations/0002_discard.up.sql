-- A DEAD event a person gave up on becomes DISCARDED (ferry dead discard)
-- instead of being deleted: the row stays as the record of that decision.
ALTER TABLE {{.Table}} ADD COLUMN discarded_at TEXT NULL;
ALTER TABLE {{.Table}} ADD COLUMN discard_reason TEXT NULL;

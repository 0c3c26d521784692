ALTER TABLE {{.Table}} DROP COLUMN discarded_at, DROP COLUMN discard_reason;

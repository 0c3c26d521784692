ALTER TABLE {{.Table}} DROP COLUMN discard_reason;
ALTER TABLE {{.Table}} DROP COLUMN discarded_at;

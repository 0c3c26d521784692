ALTER TABLE {{.Table}} DROP COLUMN IF EXISTS discarded_at, DROP COLUMN IF EXISTS discard_reason;

-- A DEAD event a person gave up on becomes DISCARDED (ferry dead discard)
-- instead of being deleted: the row stays as the record of that decision.
-- Nullable columns without a default: a catalog change, no table rewrite.
ALTER TABLE {{.Table}}
  ADD COLUMN IF NOT EXISTS discarded_at   timestamptz NULL,
  ADD COLUMN IF NOT EXISTS discard_reason text        NULL;

DROP INDEX IF EXISTS {{.DeadIndex}};
DROP INDEX IF EXISTS {{.SettledIndex}};
ALTER TABLE {{.Table}} DROP COLUMN revived_at;
ALTER TABLE {{.Table}} DROP COLUMN error_class;

ALTER TABLE {{.Table}} DROP KEY idx_dead, DROP KEY idx_settled;
ALTER TABLE {{.Table}} DROP COLUMN settled_status, DROP COLUMN route, DROP COLUMN revived_at, DROP COLUMN error_class;

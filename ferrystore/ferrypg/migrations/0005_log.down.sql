ALTER TABLE {{.RelayTable}} DROP COLUMN source;
DROP TABLE IF EXISTS {{.LogTable}};

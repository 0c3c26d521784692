DROP TABLE IF EXISTS {{.RelayTable}};

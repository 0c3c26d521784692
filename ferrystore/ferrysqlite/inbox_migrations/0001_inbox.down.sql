DROP TABLE IF EXISTS {{.Versions}};
DROP TABLE IF EXISTS {{.Conflicts}};
DROP TABLE IF EXISTS {{.Markers}};

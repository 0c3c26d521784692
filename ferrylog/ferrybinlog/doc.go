// Package ferrybinlog is the log feed of MariaDB and MySQL for ferry's log
// relay (ferrystore.LogFeed): it reads the binlog (ROW format, full row
// images) with go-mysql-org/go-mysql's replication client and reports the
// outbox rows that became NEW, in commit order.
package ferrybinlog

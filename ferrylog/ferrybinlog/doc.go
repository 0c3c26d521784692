// Package ferrybinlog is the log feed of MariaDB and MySQL for ferry's log
// relay (ferrystore.LogFeed): it reads the binlog (ROW format, full row
// images) with go-mysql-org/go-mysql's replication client and reports the
// outbox rows that became NEW, in commit order.
//
// # Server setup
//
// The server must write its binlog in ROW format with full row images:
//
//	log_bin = binlog
//	binlog_format = ROW
//	binlog_row_image = FULL
//
// and the feed's user needs, besides SELECT on the outbox table:
//
//	GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO relay;      -- MariaDB
//	GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO relay;  -- MySQL
//
// Feed.Check verifies all of it and names the fix of what is missing.
//
// # What is reported
//
// Rows of the outbox table inserted with status NEW, and rows updated to
// NEW from another status (a retry a relay recorded, ferry dead retry),
// each as its event_id and attempts, grouped by the transaction that
// committed them. Transactions rolled back never reach the binlog.
// Positions are binlog coordinates, "file:offset", each the end of a
// transaction: streaming from a batch's position resumes with the next
// transaction. The binlog is kept by the server's own expiry; a feed
// whose checkpoint's file was purged reports ferrystore.ErrLogGap, and
// the relay falls back to polling the table.
package ferrybinlog

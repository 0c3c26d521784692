// Package ferrypgoutput is the log feed of PostgreSQL for ferry's log
// relay (ferrystore.LogFeed): it reads logical replication (the pgoutput
// plugin, through jackc/pglogrepl) from a named slot over a publication of
// the outbox table, and reports the rows that became NEW, in commit order.
//
// # Setup
//
// The server needs wal_level = logical (a restart) and a free replication
// slot (max_replication_slots) and WAL sender (max_wal_senders); the role
// needs the REPLICATION attribute, and to own the outbox table for the
// publication to be created. Feed.Check verifies all of this, names what
// is missing and its fix, and creates the publication (FOR TABLE the
// outbox WITH (publish = 'insert, update')) and the slot (pgoutput, not
// temporary) when they are missing.
//
// # Positions
//
// Positions are LSNs as PostgreSQL writes them ("0/16B3748"). A batch's
// position is its transaction's end LSN: streaming from it does not report
// the transaction again. The slot remembers the last position Flushed
// sent to the server (its confirmed_flush_lsn) and keeps the WAL after it,
// so Stream with an empty position resumes there.
//
// # Gaps
//
// A slot that was dropped, or invalidated because the server removed WAL
// it needed (max_slot_wal_keep_size), makes Check and Stream return an
// error wrapping ferrystore.ErrLogGap. The caller then calls Feed.Reset,
// which creates the slot again, reads the table for what the log lost, and
// streams from the new slot.
//
// # Retiring a feed
//
// Close keeps the slot and the publication: they are what resumes the
// feed. A slot nobody reads makes the server keep WAL without end, so drop
// both when the feed is retired:
//
//	SELECT pg_drop_replication_slot('ferry_outbox_event');
//	DROP PUBLICATION ferry_outbox_event;
package ferrypgoutput

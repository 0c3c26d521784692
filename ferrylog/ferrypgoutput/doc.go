// Package ferrypgoutput is the log feed of PostgreSQL for ferry's log
// relay (ferrystore.LogFeed): it reads logical replication (the pgoutput
// plugin, through jackc/pglogrepl) from a named slot over a publication of
// the outbox table, and reports the rows that became NEW, in commit order.
package ferrypgoutput

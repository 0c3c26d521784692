// Package ferryadmin is ferry's operator API: what the ferry command's
// status, dead, conflicts, reconcile and purge do, as functions that take
// a context and a store and return plain results. The command line parses
// flags, opens the stores, calls this package and prints; a web console or
// a runbook automation can call the same functions and render the same
// results (every result is a struct with JSON tags, the JSON the command
// prints with --json).
//
// Nothing here prints, reads flags or the environment, or exits: errors
// are returned, wrapped with what was being done. Invalid options wrap
// ferrytype.ErrInvalidConfig (ferrytype.ErrInvalidIdentifier for a bad
// table or column name) and name the offending field.
//
// # Operations
//
// The outbox table, through a ferrystore.Admin (every store of ferry
// implements it):
//
//   - Status: counts by status, the oldest pending event, pending events
//     per destination, attempts, latest errors, and in sentences what
//     needs a person (StatusReport.Attention, StatusReport.Unhealthy).
//   - ListDead, CountDead, GetEvents: DEAD events by filter (DeadFilter:
//     ids, aggregate, type, destination, age, error text, error class),
//     events in full with what a DEAD event holds back in its aggregate.
//   - SummarizeDead, ErrorClass: DEAD events grouped by destination and
//     class of error (DeadGroup), the largest group first, each with the
//     filter that selects exactly its events.
//   - RetryDead, DiscardDead: act on every DEAD event a BulkOptions
//     selects, returning true totals (BulkResult: matched, changed,
//     skipped, left).
//   - ListDiscarded, RestoreDiscarded: DISCARDED events with who, why and
//     when; back to DEAD, with who restored them added to the record.
//   - Reconcile: business rows without their event (Check), SENT events
//     without their downstream effect in a consumer's inbox (Effect, keyed
//     by a KeyTemplate), events pending too long.
//   - PurgeEvents: delete old SENT and DISCARDED events.
//
// A consumer's inbox, through a ferrystore.InboxStore:
//
//   - ListConflicts, GetConflicts, ResolveConflicts: the deliveries a
//     consumer refused because their business key was applied with other
//     fields, both versions side by side, and a person's decision.
//   - PurgeMarkers: delete old inbox markers.
//
// # Guarantees
//
// Every change is conditional on the row's status at the moment of the
// statement, never on what was read before it:
//
//   - RetryDead and DiscardDead change only rows still DEAD, and
//     RestoreDiscarded only rows still DISCARDED: a row that a concurrent
//     retry, discard or relay already moved is left alone and counted in
//     BulkResult.Skipped, not in BulkResult.Changed. A run walks its
//     selection in the order (created_at, event_id) with a cursor, so an
//     event it retried that a relay takes back to DEAD during the run is
//     not met again: no event is acted on twice, and the run ends.
//   - ResolveConflicts records a decision only on a conflict still OPEN;
//     the first decision stands and a later one is reported in
//     ResolveResult.Problems. A decision is a record: it never applies the
//     refused operation, never undoes the applied one, and changes no
//     business data and no marker.
//   - PurgeEvents deletes only SENT and DISCARDED rows, never a NEW,
//     SENDING or DEAD one however old. PurgeMarkers refuses an age shorter
//     than the consumers' replay window: a marker is what makes a
//     redelivered event a duplicate.
//   - Status, ListDead, CountDead, SummarizeDead, ListDiscarded,
//     GetEvents, ListConflicts, GetConflicts and Reconcile only read.
//
// Every statement is bounded. Listings take a limit of at most
// ferrystore.MaxListLimit rows and say whether there were more. Bulk
// changes work in batches: RetryDead, DiscardDead and RestoreDiscarded
// count their selection, then list it a page at a time (without payload)
// and change at most BulkOptions.Batch events per statement, through the
// whole selection or up to BulkOptions.Max when set; SummarizeDead reads
// the same pages. None holds the selection in memory: a result keeps the
// first MaxBulkIDs ids, a summary at most 10,000 groups. No index holds
// the order (created_at, event_id): each page reads the selection's
// index entries and rows after the cursor, so a walk over N DEAD events
// reads about N²/20,000 rows (a few seconds for 100,000 on MariaDB or
// PostgreSQL). PurgeEvents and PurgeMarkers delete at most
// PurgeOptions.Batch rows per statement, optionally pausing between
// statements and stopping after PurgeOptions.MaxBatches. Both report
// progress after each batch through an optional callback, and on an error
// return what was done before it. Reconcile reads SENT events a page at a
// time (ReconcileOptions.Batch) up to ReconcileOptions.ScanLimit, looking
// each page's keys up in the consumer's inbox with one query: the outbox
// and the inbox may be different databases, even different dialects, and
// nothing is joined.
//
// # Who acts
//
// DiscardDead, RestoreDiscarded and ResolveConflicts store who took the
// decision. The caller names them: LocalActor (user@host) for a person at
// a terminal, the authenticated user for a web console.
package ferryadmin

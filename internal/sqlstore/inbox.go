package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// Default inbox table names.
const (
	DefaultMarkerTable   = "consumed_operation"
	DefaultConflictTable = "ferry_conflict"
	DefaultVersionTable  = "ferry_version"
	DefaultKeyTable      = "ferry_idempotency_key"
)

// InboxTables are an inbox's validated, unquoted table names.
type InboxTables struct{ Markers, Conflicts, Versions, Keys string }

// ResolveInboxTables applies defaults and validates each name.
func ResolveInboxTables(markers, conflicts, versions, keys string, maxLen int) (InboxTables, error) {
	t := InboxTables{markers, conflicts, versions, keys}
	if t.Markers == "" {
		t.Markers = DefaultMarkerTable
	}
	if t.Conflicts == "" {
		t.Conflicts = DefaultConflictTable
	}
	if t.Versions == "" {
		t.Versions = DefaultVersionTable
	}
	if t.Keys == "" {
		t.Keys = DefaultKeyTable
	}
	for _, n := range [][2]string{{"marker table", t.Markers}, {"conflict table", t.Conflicts}, {"version table", t.Versions}, {"idempotency key table", t.Keys}} {
		if err := ferrytype.ValidateTableName(n[0], n[1], maxLen); err != nil {
			return t, err
		}
	}
	return t, nil
}

// markerColumns lists the columns scanMarker reads.
const markerColumns = "consumer_name, business_key, event_id, fields, fingerprint, outcome, created_at"

// scanMarker reads one marker row.
func scanMarker(rows ferrystore.Rows, consumer, key string) (ferrystore.Marker, error) {
	defer rows.Close()
	var (
		m       ferrystore.Marker
		fields  []byte
		created nullTime
	)
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return m, err
		}
		return m, fmt.Errorf("marker %s/%s: %w", consumer, key, ferrytype.ErrNotFound)
	}
	if err := rows.Scan(&m.Consumer, &m.Key, &m.EventID, &fields, &m.Fingerprint, &m.Outcome, &created); err != nil {
		return m, fmt.Errorf("marker %s/%s: %w", consumer, key, err)
	}
	m.Fields, m.CreatedAt = fields, created.Time
	return m, rows.Err()
}

// conflictColumns lists the columns scanConflicts reads.
const conflictColumns = "id, consumer_name, business_key, stored_event_id, stored_fields, stored_fingerprint," +
	" incoming_event_id, incoming_fields, incoming_fingerprint, occurrences, first_seen, last_seen, status," +
	" decision, resolved_by, note, resolved_at"

// scanConflicts reads conflict rows.
func scanConflicts(rows ferrystore.Rows) ([]ferrystore.Conflict, error) {
	defer rows.Close()
	var out []ferrystore.Conflict
	for rows.Next() {
		var (
			c                              ferrystore.Conflict
			stored, incoming               []byte
			first, last, resolved          nullTime
			decision, resolvedBy, noteText sql.NullString
		)
		if err := rows.Scan(&c.ID, &c.Consumer, &c.Key, &c.Stored.EventID, &stored, &c.Stored.Fingerprint,
			&c.Incoming.EventID, &incoming, &c.Incoming.Fingerprint, &c.Occurrences, &first, &last, &c.Status,
			&decision, &resolvedBy, &noteText, &resolved); err != nil {
			return nil, fmt.Errorf("scan conflict: %w", err)
		}
		c.Stored.Fields, c.Incoming.Fields = stored, incoming
		c.FirstSeen, c.LastSeen = first.Time, last.Time
		if c.Status != "OPEN" {
			c.Resolution = &ferrystore.Resolution{Decision: decision.String, By: resolvedBy.String, Note: noteText.String,
				ResolvedAt: resolved.Time}
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// conflictLimit applies the default and cap to a conflict listing limit.
func conflictLimit(n int) int {
	switch {
	case n <= 0:
		return 100
	case n > 10000:
		return 10000
	}
	return n
}

// AdvanceVersion reads the version of (consumer, aggregate) with sel (which
// locks the row where the dialect has row locks) and, when version is newer
// (contiguous: exactly the next), stores it with upd. Both statements take
// consumer and aggregate; upd takes the version first.
func AdvanceVersion(ctx context.Context, ex ferrystore.Executor, sel, upd, consumer, aggregate string, version int64, contiguous bool) (int64, bool, error) {
	rows, err := ex.Query(ctx, sel, consumer, aggregate)
	if err != nil {
		return 0, false, fmt.Errorf("version guard: %w", err)
	}
	var prev int64
	if rows.Next() {
		err = rows.Scan(&prev)
	}
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, false, fmt.Errorf("version guard: %w", err)
	}
	if version <= prev || (contiguous && version != prev+1) {
		return prev, false, nil
	}
	if _, err := ex.Exec(ctx, upd, version, consumer, aggregate); err != nil {
		return prev, false, fmt.Errorf("version guard: %w", err)
	}
	return prev, true, nil
}

// checkMarkerKeys validates the key list of ExistingMarkers.
func checkMarkerKeys(keys []string) error {
	if len(keys) > ferrystore.MaxListLimit {
		return fmt.Errorf("%w: existing markers: %d keys, at most %d per call", ferrytype.ErrInvalidConfig, len(keys),
			ferrystore.MaxListLimit)
	}
	return nil
}

// ScanSet reads rows of one string column into a set and closes them.
func ScanSet(rows ferrystore.Rows) (map[string]bool, error) {
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		out[k] = true
	}
	return out, rows.Err()
}

// scanCounts reads (name, count) rows into a map and closes them.
func scanCounts(rows ferrystore.Rows) (map[string]int64, error) {
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var (
			k string
			n int64
		)
		if err := rows.Scan(&k, &n); err != nil {
			return nil, fmt.Errorf("scan count: %w", err)
		}
		out[k] = n
	}
	return out, rows.Err()
}

// ScanMarkerCounts reads (consumer, outcome, count) rows and closes them.
func ScanMarkerCounts(rows ferrystore.Rows) ([]ferrystore.MarkerCount, error) {
	defer rows.Close()
	out := []ferrystore.MarkerCount{}
	for rows.Next() {
		var c ferrystore.MarkerCount
		if err := rows.Scan(&c.Consumer, &c.Outcome, &c.Markers); err != nil {
			return nil, fmt.Errorf("scan marker count: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("recent markers: %w", err)
	}
	return out, nil
}

// InboxSQL is an inbox store's SQL, in its dialect, for the operations that
// every dialect runs the same way. The arguments each statement takes are
// fixed, in this order:
type InboxSQL struct {
	// InsertMarker: consumer, key, event id, fields, fingerprint, outcome.
	InsertMarker string
	// GetMarker: consumer, key. Selects markerColumns.
	GetMarker string
	// Conflicts: all (bool), consumer, consumer, limit. Selects
	// conflictColumns, newest first; an empty consumer means every one.
	Conflicts string
	// GetConflict: id. Selects conflictColumns.
	GetConflict string
	// ResolveConflict: decision, by, note, id; changes an OPEN conflict
	// only.
	ResolveConflict string
	// MarkerCount: consumer, consumer (empty: every consumer).
	MarkerCount string
	// OpenConflicts: no arguments. Selects consumer_name and a count.
	OpenConflicts string
	// ExistingMarkers returns the statement and its arguments that select
	// the business_key of consumer's markers among keys.
	ExistingMarkers func(consumer string, keys []string) (string, []any)
}

// InboxBase implements the ferrystore.InboxStore operations that every SQL
// dialect runs the same way, on the store's own pool. Stores embed it and
// add what is their own: migrations, conflicts' upsert, the version guard,
// error classification, retention.
type InboxBase struct {
	Pool ferrystore.Executor
	SQL  InboxSQL
}

// InsertMarker inserts m in the operation's transaction.
func (b *InboxBase) InsertMarker(ctx context.Context, ex ferrystore.Executor, m ferrystore.Marker) error {
	_, err := ex.Exec(ctx, b.SQL.InsertMarker, m.Consumer, m.Key, m.EventID, string(m.Fields), m.Fingerprint, m.Outcome)
	return err
}

// GetMarker reads a committed marker.
func (b *InboxBase) GetMarker(ctx context.Context, consumer, key string) (ferrystore.Marker, error) {
	rows, err := b.Pool.Query(ctx, b.SQL.GetMarker, consumer, key)
	if err != nil {
		return ferrystore.Marker{}, fmt.Errorf("read marker: %w", err)
	}
	return scanMarker(rows, consumer, key)
}

// Conflicts lists conflicts, newest first.
func (b *InboxBase) Conflicts(ctx context.Context, f ferrystore.ConflictFilter) ([]ferrystore.Conflict, error) {
	rows, err := b.Pool.Query(ctx, b.SQL.Conflicts, f.All, f.Consumer, f.Consumer, conflictLimit(f.Limit))
	if err != nil {
		return nil, fmt.Errorf("list conflicts: %w", err)
	}
	return scanConflicts(rows)
}

// GetConflict returns one conflict.
func (b *InboxBase) GetConflict(ctx context.Context, id int64) (ferrystore.Conflict, error) {
	rows, err := b.Pool.Query(ctx, b.SQL.GetConflict, id)
	if err != nil {
		return ferrystore.Conflict{}, fmt.Errorf("get conflict %d: %w", id, err)
	}
	cs, err := scanConflicts(rows)
	if err != nil {
		return ferrystore.Conflict{}, err
	}
	if len(cs) == 0 {
		return ferrystore.Conflict{}, fmt.Errorf("conflict %d: %w", id, ferrytype.ErrNotFound)
	}
	return cs[0], nil
}

// ResolveConflict records a decision on an open conflict.
func (b *InboxBase) ResolveConflict(ctx context.Context, id int64, r ferrystore.Resolution) error {
	n, err := b.Pool.Exec(ctx, b.SQL.ResolveConflict, r.Decision, r.By, r.Note, id)
	if err != nil {
		return fmt.Errorf("resolve conflict %d: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("open conflict %d: %w", id, ferrytype.ErrNotFound)
	}
	return nil
}

// MarkerCount counts markers.
func (b *InboxBase) MarkerCount(ctx context.Context, consumer string) (int64, error) {
	rows, err := b.Pool.Query(ctx, b.SQL.MarkerCount, consumer, consumer)
	if err != nil {
		return 0, fmt.Errorf("count markers: %w", err)
	}
	defer rows.Close()
	var n int64
	if rows.Next() {
		err = rows.Scan(&n)
	}
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return 0, fmt.Errorf("count markers: %w", err)
	}
	return n, nil
}

// ExistingMarkers returns the keys among keys that consumer has markers
// for, looked up by the primary key (consumer_name, business_key).
func (b *InboxBase) ExistingMarkers(ctx context.Context, consumer string, keys []string) (map[string]bool, error) {
	if err := checkMarkerKeys(keys); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return map[string]bool{}, nil
	}
	q, args := b.SQL.ExistingMarkers(consumer, keys)
	rows, err := b.Pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("existing markers: %w", err)
	}
	return ScanSet(rows)
}

// OpenConflicts counts open conflicts by consumer.
func (b *InboxBase) OpenConflicts(ctx context.Context) (map[string]int64, error) {
	rows, err := b.Pool.Query(ctx, b.SQL.OpenConflicts)
	if err != nil {
		return nil, fmt.Errorf("count open conflicts: %w", err)
	}
	return scanCounts(rows)
}

// inExistingMarkers is ExistingMarkers' statement for dialects with ?
// placeholders and an IN list: markers is the quoted marker table.
func inExistingMarkers(markers string) func(consumer string, keys []string) (string, []any) {
	return func(consumer string, keys []string) (string, []any) {
		in, args := InList("business_key", keys)
		return "SELECT business_key FROM " + markers + " WHERE consumer_name = ? AND " + in, append([]any{consumer}, args...)
	}
}

// PlainInboxSQL is the inbox SQL of the dialects with ? placeholders that
// need no casts (MySQL, SQLite): m and c are the quoted marker and
// conflict tables, now the database clock.
func PlainInboxSQL(m, c, now string) InboxSQL {
	return InboxSQL{
		InsertMarker: "INSERT INTO " + m + " (consumer_name, business_key, event_id, fields, fingerprint, outcome)" +
			" VALUES (?, ?, ?, ?, ?, ?)",
		GetMarker: "SELECT " + markerColumns + " FROM " + m + " WHERE consumer_name = ? AND business_key = ?",
		Conflicts: "SELECT " + conflictColumns + " FROM " + c +
			" WHERE (? OR status = 'OPEN') AND (? = '' OR consumer_name = ?) ORDER BY id DESC LIMIT ?",
		GetConflict: "SELECT " + conflictColumns + " FROM " + c + " WHERE id = ?",
		ResolveConflict: "UPDATE " + c + " SET status = 'RESOLVED', decision = ?, resolved_by = ?, note = ?," +
			" resolved_at = " + now + " WHERE id = ? AND status = 'OPEN'",
		MarkerCount: "SELECT COUNT(*) FROM " + m + " WHERE ? = '' OR consumer_name = ?",
		// through the (status, id) index
		OpenConflicts:   "SELECT consumer_name, COUNT(*) FROM " + c + " WHERE status = 'OPEN' GROUP BY consumer_name",
		ExistingMarkers: inExistingMarkers(m),
	}
}

package sqlutil

import (
	"context"
	"fmt"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// InboxSQL is an inbox store's SQL, in its dialect, for the operations that
// every dialect runs the same way. The arguments each statement takes are
// fixed, in this order:
type InboxSQL struct {
	// InsertMarker: consumer, key, event id, fields, fingerprint, outcome.
	InsertMarker string
	// GetMarker: consumer, key. Selects MarkerColumns.
	GetMarker string
	// Conflicts: all (bool), consumer, consumer, limit. Selects
	// ConflictColumns, newest first; an empty consumer means every one.
	Conflicts string
	// GetConflict: id. Selects ConflictColumns.
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
	return ScanMarker(rows, consumer, key)
}

// Conflicts lists conflicts, newest first.
func (b *InboxBase) Conflicts(ctx context.Context, f ferrystore.ConflictFilter) ([]ferrystore.Conflict, error) {
	rows, err := b.Pool.Query(ctx, b.SQL.Conflicts, f.All, f.Consumer, f.Consumer, ConflictLimit(f.Limit))
	if err != nil {
		return nil, fmt.Errorf("list conflicts: %w", err)
	}
	return ScanConflicts(rows)
}

// GetConflict returns one conflict.
func (b *InboxBase) GetConflict(ctx context.Context, id int64) (ferrystore.Conflict, error) {
	rows, err := b.Pool.Query(ctx, b.SQL.GetConflict, id)
	if err != nil {
		return ferrystore.Conflict{}, fmt.Errorf("get conflict %d: %w", id, err)
	}
	cs, err := ScanConflicts(rows)
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
	if err := CheckMarkerKeys(keys); err != nil {
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
	return ScanKeys(rows)
}

// OpenConflicts counts open conflicts by consumer.
func (b *InboxBase) OpenConflicts(ctx context.Context) (map[string]int64, error) {
	rows, err := b.Pool.Query(ctx, b.SQL.OpenConflicts)
	if err != nil {
		return nil, fmt.Errorf("count open conflicts: %w", err)
	}
	return ScanCounts(rows)
}

// InExistingMarkers is ExistingMarkers' statement for dialects with ?
// placeholders and an IN list: markers is the quoted marker table.
func InExistingMarkers(markers string) func(consumer string, keys []string) (string, []any) {
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
		GetMarker: "SELECT " + MarkerColumns + " FROM " + m + " WHERE consumer_name = ? AND business_key = ?",
		Conflicts: "SELECT " + ConflictColumns + " FROM " + c +
			" WHERE (? OR status = 'OPEN') AND (? = '' OR consumer_name = ?) ORDER BY id DESC LIMIT ?",
		GetConflict: "SELECT " + ConflictColumns + " FROM " + c + " WHERE id = ?",
		ResolveConflict: "UPDATE " + c + " SET status = 'RESOLVED', decision = ?, resolved_by = ?, note = ?," +
			" resolved_at = " + now + " WHERE id = ? AND status = 'OPEN'",
		MarkerCount: "SELECT COUNT(*) FROM " + m + " WHERE ? = '' OR consumer_name = ?",
		// through the (status, id) index
		OpenConflicts:   "SELECT consumer_name, COUNT(*) FROM " + c + " WHERE status = 'OPEN' GROUP BY consumer_name",
		ExistingMarkers: InExistingMarkers(m),
	}
}

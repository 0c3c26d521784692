package sqlutil

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
		if err := ferrytype.ValidateIdentifier(n[0], n[1], maxLen); err != nil {
			return t, err
		}
	}
	return t, nil
}

// MarkerColumns lists the columns ScanMarker reads.
const MarkerColumns = "consumer_name, business_key, event_id, fields, fingerprint, outcome, created_at"

// ScanMarker reads one marker row.
func ScanMarker(rows ferrystore.Rows, consumer, key string) (ferrystore.Marker, error) {
	defer rows.Close()
	var (
		m       ferrystore.Marker
		fields  []byte
		created NullTime
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

// ConflictColumns lists the columns ScanConflicts reads.
const ConflictColumns = "id, consumer_name, business_key, stored_event_id, stored_fields, stored_fingerprint," +
	" incoming_event_id, incoming_fields, incoming_fingerprint, occurrences, first_seen, last_seen, status," +
	" decision, resolved_by, note, resolved_at"

// ScanConflicts reads conflict rows.
func ScanConflicts(rows ferrystore.Rows) ([]ferrystore.Conflict, error) {
	defer rows.Close()
	var out []ferrystore.Conflict
	for rows.Next() {
		var (
			c                              ferrystore.Conflict
			stored, incoming               []byte
			first, last, resolved          NullTime
			decision, resolvedBy, noteText sql.NullString
		)
		if err := rows.Scan(&c.ID, &c.Consumer, &c.Key, &c.StoredEventID, &stored, &c.StoredFingerprint,
			&c.IncomingEventID, &incoming, &c.IncomingFingerprint, &c.Occurrences, &first, &last, &c.Status,
			&decision, &resolvedBy, &noteText, &resolved); err != nil {
			return nil, fmt.Errorf("scan conflict: %w", err)
		}
		c.StoredFields, c.IncomingFields = stored, incoming
		c.FirstSeen, c.LastSeen, c.ResolvedAt = first.Time, last.Time, resolved.Time
		c.Resolution = ferrystore.Resolution{Decision: decision.String, By: resolvedBy.String, Note: noteText.String}
		out = append(out, c)
	}
	return out, rows.Err()
}

// ConflictLimit applies the default and cap to a conflict listing limit.
func ConflictLimit(n int) int {
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

// CheckMarkerKeys validates the key list of ExistingMarkers.
func CheckMarkerKeys(keys []string) error {
	if len(keys) > ferrystore.MaxListLimit {
		return fmt.Errorf("%w: existing markers: %d keys, at most %d per call", ferrytype.ErrInvalidConfig, len(keys),
			ferrystore.MaxListLimit)
	}
	return nil
}

// ScanKeys reads rows of one string column into a set and closes them.
func ScanKeys(rows ferrystore.Rows) (map[string]bool, error) {
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("scan marker key: %w", err)
		}
		out[k] = true
	}
	return out, rows.Err()
}

// ScanCounts reads (name, count) rows into a map and closes them.
func ScanCounts(rows ferrystore.Rows) (map[string]int64, error) {
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

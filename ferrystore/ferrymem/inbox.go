package ferrymem

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing/fstest"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/sqlstore"
)

// InboxConfig configures an Inbox. The zero value (or nil) uses the
// defaults. Names are validated as the SQL stores validate them (letters,
// digits and underscores, not starting with a digit, at most 49 bytes).
// Inboxes of one DB on one marker table share its markers, as inboxes on
// one SQL database do; so with the other tables.
type InboxConfig struct {
	// MarkerTable holds the markers. Default "consumed_operation".
	MarkerTable string
	// ConflictTable holds recorded conflicts. Default "ferry_conflict".
	ConflictTable string
	// VersionTable holds the order guard's versions. Default
	// "ferry_version".
	VersionTable string
	// KeyTable holds idempotency keys (ferryhttp). Default
	// "ferry_idempotency_key".
	KeyTable string
}

// Inbox is the inbox tables in a DB: markers, conflicts, versions and
// idempotency keys. It implements ferrystore.IdempotencyDriver[*Tx] (and so
// ferrystore.InboxDriver[*Tx]).
type Inbox struct {
	db        *DB
	markers   *markerTable
	conflicts *conflictTable
	versions  *versionTable
	keys      *keyTable
}

var _ ferrystore.IdempotencyDriver[*Tx] = (*Inbox)(nil)

// markerTable holds committed markers by consumer and key.
type markerTable struct {
	name string
	rows map[markerKey]ferrystore.Marker
}

type markerKey struct{ consumer, key string }

// stagedMarker is a marker a transaction inserted.
type stagedMarker struct {
	table  *markerTable
	marker ferrystore.Marker
}

// conflictTable holds recorded conflicts.
type conflictTable struct {
	rows   map[int64]*ferrystore.Conflict
	nextID int64
}

// versionTable holds the order guard's versions.
type versionTable struct {
	name string
	rows map[versionKey]int64
}

type versionKey struct{ consumer, aggregate string }

// versionLock names a transaction's staged version.
type versionLock struct {
	table *versionTable
	key   versionKey
}

// NewInbox returns the inbox tables of db named by cfg: tables that exist
// from then on.
func NewInbox(db *DB, cfg *InboxConfig) (*Inbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: ferrymem.NewInbox: db is nil", ferrytype.ErrInvalidConfig)
	}
	if cfg == nil {
		cfg = &InboxConfig{}
	}
	t, err := sqlstore.ResolveInboxTables(cfg.MarkerTable, cfg.ConflictTable, cfg.VersionTable, cfg.KeyTable, maxTable)
	if err != nil {
		return nil, err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	in := &Inbox{db: db, markers: db.markers[t.Markers], conflicts: db.conflicts[t.Conflicts],
		versions: db.versions[t.Versions], keys: db.keys[t.Keys]}
	if in.markers == nil {
		in.markers = &markerTable{name: t.Markers, rows: map[markerKey]ferrystore.Marker{}}
		db.markers[t.Markers] = in.markers
	}
	if in.conflicts == nil {
		in.conflicts = &conflictTable{rows: map[int64]*ferrystore.Conflict{}}
		db.conflicts[t.Conflicts] = in.conflicts
	}
	if in.versions == nil {
		in.versions = &versionTable{name: t.Versions, rows: map[versionKey]int64{}}
		db.versions[t.Versions] = in.versions
	}
	if in.keys == nil {
		in.keys = &keyTable{name: t.Keys, rows: map[string]*keyRow{}}
		db.keys[t.Keys] = in.keys
	}
	return in, nil
}

// DB returns the inbox's database.
func (in *Inbox) DB() *DB { return in.db }

// Dialect returns "memory".
func (in *Inbox) Dialect() string { return dialect }

// Migrate does nothing and succeeds: the tables exist from NewInbox on.
func (in *Inbox) Migrate(ctx context.Context) error { return ctx.Err() }

// Migrations returns an empty set of migrations.
func (in *Inbox) Migrations() (fs.FS, error) { return fstest.MapFS{}, nil }

// Close does nothing: the inbox opened nothing.
func (in *Inbox) Close() error { return nil }

// Classify puts the database's errors in ferry's classes (see
// Store.Classify).
func (in *Inbox) Classify(err error) error { return classify(err) }

// Begin starts a transaction on the inbox's database (DB.Begin).
func (in *Inbox) Begin(ctx context.Context) (*Tx, error) { return in.db.Begin(ctx) }

// Commit commits tx (Tx.Commit).
func (in *Inbox) Commit(_ context.Context, tx *Tx) error { return tx.Commit() }

// Rollback rolls tx back (Tx.Rollback).
func (in *Inbox) Rollback(_ context.Context, tx *Tx) error { return tx.Rollback() }

// UnwrapTx returns the Executor of tx, which InsertMarker, AdvanceVersion
// and CompleteKey recognise. It runs no SQL.
func (in *Inbox) UnwrapTx(tx *Tx) ferrystore.Executor { return unwrap(tx) }

// InsertMarker stages m in the transaction of ex, created now by the
// database clock. The marker's key (consumer, key) is arbitrated as a
// unique key is: while another open transaction inserted the same key,
// InsertMarker waits for it to end; then it fails with an error in
// ferrytype.ErrDuplicate if a marker of the key committed, and goes on if
// none did.
func (in *Inbox) InsertMarker(ctx context.Context, ex ferrystore.Executor, m ferrystore.Marker) error {
	tx, err := txOf(in.db, "InsertMarker", ex)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	db, t := in.db, in.markers
	db.mu.Lock()
	defer db.mu.Unlock()
	if err := db.acquire(ctx, tx, "inbox\x00"+t.name+"\x00marker\x00"+m.Consumer+"\x00"+m.Key); err != nil {
		return classify(err)
	}
	_, committed := t.rows[markerKey{m.Consumer, m.Key}]
	staged := slices.ContainsFunc(tx.markers, func(s stagedMarker) bool {
		return s.table == t && s.marker.Consumer == m.Consumer && s.marker.Key == m.Key
	})
	if committed || staged {
		return classify(fmt.Errorf("ferrymem: %w: marker (%s, %s) exists in %s", errDuplicate, m.Consumer, m.Key, t.name))
	}
	m.Fields, m.CreatedAt = slices.Clone(m.Fields), db.now()
	tx.markers = append(tx.markers, stagedMarker{t, m})
	return nil
}

// GetMarker reads a committed marker; ferrytype.ErrNotFound when none.
func (in *Inbox) GetMarker(ctx context.Context, consumer, key string) (ferrystore.Marker, error) {
	var m ferrystore.Marker
	err := in.db.statement(ctx, func(time.Time) error {
		var ok bool
		if m, ok = in.markers.rows[markerKey{consumer, key}]; !ok {
			return fmt.Errorf("marker %s/%s: %w", consumer, key, ferrytype.ErrNotFound)
		}
		m.Fields = slices.Clone(m.Fields)
		return nil
	})
	if err != nil {
		return ferrystore.Marker{}, fmt.Errorf("read marker: %w", err)
	}
	return m, nil
}

// RecordConflict stores c, or counts one more occurrence of the conflict
// of its consumer, key and incoming fingerprint; it returns its id.
func (in *Inbox) RecordConflict(ctx context.Context, c ferrystore.Conflict) (int64, error) {
	var id int64
	err := in.db.statement(ctx, func(now time.Time) error {
		t := in.conflicts
		for _, have := range t.rows {
			if have.Consumer == c.Consumer && have.Key == c.Key && have.Incoming.Fingerprint == c.Incoming.Fingerprint {
				have.Occurrences++
				have.LastSeen = now
				id = have.ID
				return nil
			}
		}
		t.nextID++
		id = t.nextID
		t.rows[id] = &ferrystore.Conflict{ID: id, Consumer: c.Consumer, Key: c.Key, Status: "OPEN", Occurrences: 1,
			FirstSeen: now, LastSeen: now, Stored: cloneSide(c.Stored), Incoming: cloneSide(c.Incoming)}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("record conflict: %w", err)
	}
	return id, nil
}

func cloneSide(s ferrystore.ConflictSide) ferrystore.ConflictSide {
	s.Fields = slices.Clone(s.Fields)
	return s
}

// copyConflict returns c with nothing shared with the table.
func copyConflict(c *ferrystore.Conflict) ferrystore.Conflict {
	out := *c
	out.Stored, out.Incoming = cloneSide(c.Stored), cloneSide(c.Incoming)
	if c.Resolution != nil {
		r := *c.Resolution
		out.Resolution = &r
	}
	return out
}

// AdvanceVersion moves the version of (consumer, aggregate) to version in
// the transaction of ex when the version stored (or staged by ex's
// transaction; 0 when none) is lower — exactly version-1 when contiguous.
// The version stays locked until the transaction ends, as the row lock of
// the SQL stores keeps it: concurrent operations of one aggregate are
// serialised.
func (in *Inbox) AdvanceVersion(ctx context.Context, ex ferrystore.Executor, consumer, aggregate string, version int64, contiguous bool) (int64, bool, error) {
	tx, err := txOf(in.db, "AdvanceVersion", ex)
	if err != nil {
		return 0, false, fmt.Errorf("version guard: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, false, fmt.Errorf("version guard: %w", err)
	}
	db, t := in.db, in.versions
	db.mu.Lock()
	defer db.mu.Unlock()
	if err := db.acquire(ctx, tx, "inbox\x00"+t.name+"\x00version\x00"+consumer+"\x00"+aggregate); err != nil {
		return 0, false, fmt.Errorf("version guard: %w", classify(err))
	}
	k := versionLock{t, versionKey{consumer, aggregate}}
	prev, ok := tx.versions[k]
	if !ok {
		prev = t.rows[k.key]
	}
	if version <= prev || (contiguous && version != prev+1) {
		return prev, false, nil
	}
	if tx.versions == nil {
		tx.versions = map[versionLock]int64{}
	}
	tx.versions[k] = version
	return prev, true, nil
}

// PurgeMarkers deletes up to limit markers older than olderThan, oldest
// first.
func (in *Inbox) PurgeMarkers(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	if err := positive("purge markers", limit); err != nil {
		return 0, err
	}
	var n int64
	err := in.db.statement(ctx, func(now time.Time) error {
		old := in.markersBefore(now.Add(-olderThan))
		for _, k := range old[:min(len(old), limit)] {
			delete(in.markers.rows, k)
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("purge markers: %w", err)
	}
	return n, nil
}

// markersBefore returns the keys of the markers created before at, oldest
// first.
func (in *Inbox) markersBefore(at time.Time) []markerKey {
	var out []markerKey
	for k, m := range in.markers.rows {
		if m.CreatedAt.Before(at) {
			out = append(out, k)
		}
	}
	rows := in.markers.rows
	slices.SortFunc(out, func(a, b markerKey) int {
		return cmp.Or(rows[a].CreatedAt.Compare(rows[b].CreatedAt), strings.Compare(a.consumer, b.consumer),
			strings.Compare(a.key, b.key))
	})
	return out
}

// PurgeableMarkers counts the markers older than olderThan.
func (in *Inbox) PurgeableMarkers(ctx context.Context, olderThan time.Duration) (int64, error) {
	var n int64
	err := in.db.statement(ctx, func(now time.Time) error {
		n = int64(len(in.markersBefore(now.Add(-olderThan))))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("count purgeable markers: %w", err)
	}
	return n, nil
}

// Conflicts lists conflicts, newest first: the open ones, or all with
// f.All; of f.Consumer when set; at most f.Limit (default 100, at most
// 10000).
func (in *Inbox) Conflicts(ctx context.Context, f ferrystore.ConflictFilter) ([]ferrystore.Conflict, error) {
	limit := f.Limit
	switch {
	case limit <= 0:
		limit = 100
	case limit > 10000:
		limit = 10000
	}
	var out []ferrystore.Conflict
	err := in.db.statement(ctx, func(time.Time) error {
		for _, c := range in.conflicts.rows {
			if (f.All || c.Status == "OPEN") && (f.Consumer == "" || c.Consumer == f.Consumer) {
				out = append(out, copyConflict(c))
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list conflicts: %w", err)
	}
	slices.SortFunc(out, func(a, b ferrystore.Conflict) int { return cmp.Compare(b.ID, a.ID) })
	return out[:min(len(out), limit)], nil
}

// GetConflict returns one conflict; ferrytype.ErrNotFound when none.
func (in *Inbox) GetConflict(ctx context.Context, id int64) (ferrystore.Conflict, error) {
	var out ferrystore.Conflict
	err := in.db.statement(ctx, func(time.Time) error {
		c := in.conflicts.rows[id]
		if c == nil {
			return fmt.Errorf("conflict %d: %w", id, ferrytype.ErrNotFound)
		}
		out = copyConflict(c)
		return nil
	})
	if err != nil {
		return ferrystore.Conflict{}, fmt.Errorf("get conflict %d: %w", id, err)
	}
	return out, nil
}

// ResolveConflict records a person's decision on an open conflict,
// stamped with the database clock; ferrytype.ErrNotFound when the
// conflict does not exist or is resolved already.
func (in *Inbox) ResolveConflict(ctx context.Context, id int64, r ferrystore.Resolution) error {
	err := in.db.statement(ctx, func(now time.Time) error {
		c := in.conflicts.rows[id]
		if c == nil || c.Status != "OPEN" {
			return fmt.Errorf("open conflict %d: %w", id, ferrytype.ErrNotFound)
		}
		r.ResolvedAt = now
		c.Status, c.Resolution = "RESOLVED", &r
		return nil
	})
	if err != nil {
		return fmt.Errorf("resolve conflict %d: %w", id, err)
	}
	return nil
}

// OpenConflicts counts the open conflicts of each consumer that has any.
func (in *Inbox) OpenConflicts(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	err := in.db.statement(ctx, func(time.Time) error {
		for _, c := range in.conflicts.rows {
			if c.Status == "OPEN" {
				out[c.Consumer]++
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count open conflicts: %w", err)
	}
	return out, nil
}

// MarkerCount counts the markers of consumer, of all consumers when empty.
func (in *Inbox) MarkerCount(ctx context.Context, consumer string) (int64, error) {
	var n int64
	err := in.db.statement(ctx, func(time.Time) error {
		for k := range in.markers.rows {
			if consumer == "" || k.consumer == consumer {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("count markers: %w", err)
	}
	return n, nil
}

// ExistingMarkers returns the keys among keys (at most
// ferrystore.MaxListLimit) for which consumer has a committed marker.
func (in *Inbox) ExistingMarkers(ctx context.Context, consumer string, keys []string) (map[string]bool, error) {
	if len(keys) > ferrystore.MaxListLimit {
		return nil, fmt.Errorf("%w: existing markers: %d keys, at most %d per call", ferrytype.ErrInvalidConfig, len(keys),
			ferrystore.MaxListLimit)
	}
	out := map[string]bool{}
	err := in.db.statement(ctx, func(time.Time) error {
		for _, k := range keys {
			if _, ok := in.markers.rows[markerKey{consumer, k}]; ok {
				out[k] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("existing markers: %w", err)
	}
	return out, nil
}

// RecentMarkers counts the markers created within the last `within`, by
// the database clock, per consumer and outcome, in that order.
func (in *Inbox) RecentMarkers(ctx context.Context, within time.Duration) ([]ferrystore.MarkerCount, error) {
	out := []ferrystore.MarkerCount{}
	err := in.db.statement(ctx, func(now time.Time) error {
		counts := map[[2]string]int64{}
		for k, m := range in.markers.rows {
			if !m.CreatedAt.Before(now.Add(-within)) {
				counts[[2]string{k.consumer, m.Outcome}]++
			}
		}
		for k, n := range counts {
			out = append(out, ferrystore.MarkerCount{Consumer: k[0], Outcome: k[1], Markers: n})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("recent markers: %w", err)
	}
	slices.SortFunc(out, func(a, b ferrystore.MarkerCount) int {
		return cmp.Or(strings.Compare(a.Consumer, b.Consumer), strings.Compare(a.Outcome, b.Outcome))
	})
	return out, nil
}

package ferryadmin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/errclass"
)

// DefaultBulkBatch is the default of BulkOptions.Batch.
const DefaultBulkBatch = 1000

// MaxBulkIDs bounds BulkResult.IDs.
const MaxBulkIDs = 1000

// DeadFilter selects DEAD events (DISCARDED ones for ListDiscarded and
// RestoreDiscarded). Empty fields do not filter; an empty filter selects
// every event of the status.
type DeadFilter struct {
	// IDs are event ids (at most ferrystore.MaxListLimit). Blank ones are
	// ignored.
	IDs []string
	// AggregateType and AggregateID match exactly; AggregateID set selects
	// by aggregate ("" is a valid AggregateType).
	AggregateType, AggregateID string
	// Type matches the event type.
	Type string
	// Destination matches where the event is published: its destination,
	// or its type when it has none.
	Destination string
	// ErrorContains keeps events whose last error contains this text, as
	// text (% and _ are no wildcards), ignoring the case of ASCII letters;
	// at most ferrystore.MaxErrorContains bytes.
	ErrorContains string
	// ErrorClass keeps events whose last error is of this class
	// (ErrorClass), exactly: a group of SummarizeDead. The store is asked
	// for the class's words, so that few rows of other classes come back;
	// each row it returns is then classified here. So a selection by
	// class reads the selection's rows (without payload) a page at a time,
	// and CountDead counts them that way too.
	ErrorClass string
	// MaxAge keeps events created at most this long ago, MinAge events
	// created at least this long ago, by the database clock. Zero: no
	// bound.
	MaxAge, MinAge time.Duration
	// DiedBy keeps the DEAD events that died at or before this instant of
	// the database clock (ferrystore.Filter.DiedBy); zero: no bound. A
	// dry run's BulkResult.At is the instant to confirm it with, so that
	// the action acts on the events the dry run counted and on none that
	// died after it, whatever their age. Not for DISCARDED events.
	DiedBy time.Time
}

// Selects reports whether f narrows the selection at all.
func (f *DeadFilter) Selects() bool {
	return len(f.ids()) > 0 || f.AggregateID != "" || f.Type != "" || f.Destination != "" || f.MaxAge > 0 || f.MinAge > 0 ||
		f.ErrorContains != "" || f.ErrorClass != ""
}

func (f *DeadFilter) ids() []string {
	var out []string
	for _, id := range f.IDs {
		if id = strings.TrimSpace(id); id != "" {
			out = append(out, id)
		}
	}
	return out
}

// walkPage is the page size of walks that read rows without payload.
const walkPage = ferrystore.MaxStateListLimit

// selection is a DeadFilter ready to run: one store filter, or, for an
// error class, two walked one after the other (parts).
type selection struct {
	parts []part
}

// part is one store filter of a selection, and the error class its rows
// must have where the store cannot tell: rows that failed before the table
// had migration 0004 recorded no class, so their class is computed here
// from their last error.
type part struct {
	f     ferrystore.Filter
	class string
}

func (p *part) match(r *ferrystore.Row) bool {
	return p.class == "" || ErrorClass(r.LastError) == p.class
}

// selection returns the selection of f among events of status, validated.
// An error class selects, in the database, the rows that recorded it (the
// DEAD index, by destination and class), then the rows that recorded none,
// narrowed by the class's words and classified here: the DEAD index's
// entries without a class (unrecorded), by destination and type.
func (f *DeadFilter) selection(status ferrytype.Status) (selection, error) {
	sf := ferrystore.Filter{Statuses: []ferrytype.Status{status}, IDs: f.ids(),
		AggregateType: f.AggregateType, AggregateID: f.AggregateID, Type: f.Type, Destination: f.Destination,
		MinAge: f.MinAge, MaxAge: f.MaxAge, DiedBy: f.DiedBy}
	var sel selection
	switch {
	case f.AggregateType != "" && f.AggregateID == "":
		return sel, invalid("DeadFilter.AggregateType %q without an AggregateID", f.AggregateType)
	case len(f.ErrorContains) > ferrystore.MaxErrorContains:
		return sel, invalid("DeadFilter.ErrorContains has %d bytes, at most %d are allowed", len(f.ErrorContains), ferrystore.MaxErrorContains)
	case !utf8.ValidString(f.ErrorContains) || strings.ContainsRune(f.ErrorContains, 0):
		return sel, invalid("DeadFilter.ErrorContains %q is not valid UTF-8 text", f.ErrorContains)
	case f.ErrorClass != "" && ErrorClass(f.ErrorClass) != f.ErrorClass:
		return sel, invalid("DeadFilter.ErrorClass %q is not a class (ErrorClass makes it %q)", f.ErrorClass, ErrorClass(f.ErrorClass))
	}
	if f.ErrorContains != "" {
		sf.ErrorContains = append(sf.ErrorContains, f.ErrorContains)
	}
	if err := sf.ValidateSelection(); err != nil {
		return sel, err
	}
	if f.ErrorClass == "" {
		sel.parts = []part{{f: sf}}
		return sel, nil
	}
	recorded, unrecorded := sf, sf
	recorded.ErrorClass = f.ErrorClass
	unrecorded.Unclassified = true
	unrecorded.ErrorContains = append(append([]string(nil), sf.ErrorContains...), errclass.Words(f.ErrorClass)...)
	sel.parts = []part{{f: recorded}, {f: unrecorded, class: f.ErrorClass}}
	return sel, nil
}

// columns says what a walk reads of each row.
type columns int

const (
	readAll   columns = iota // the whole row
	readState                // all but the payload and headers
	readKeys                 // the id and the creation time, where the database selects every row
)

// walkPart calls fn with the rows of p, oldest first, a page of at most
// page rows listed at a time (fewer reach fn when p has a class), until
// the part ends (true) or fn returns false (false). Each page starts after
// the last row of the one before, so a row that changes status, or stays
// and does not match, is never listed again. A part of rows without a
// recorded class is walked as it is: unrecorded makes index ranges of it
// first.
func walkPart(ctx context.Context, a ferrystore.Admin, p part, page int, cols columns,
	fn func([]ferrystore.Row) (bool, error)) (bool, error) {
	f := p.f
	f.Limit, f.NoPayload = page, cols != readAll
	// A walk of ids needs no row where the database selects every one.
	f.KeysOnly = cols == readKeys && p.class == ""
	for {
		rows, err := a.List(ctx, f)
		if err != nil {
			return false, err
		}
		if len(rows) == 0 {
			return true, nil
		}
		f.After = ferrystore.ListCursorOf(rows[len(rows)-1])
		kept := make([]ferrystore.Row, 0, len(rows))
		for i := range rows {
			if p.match(&rows[i]) {
				kept = append(kept, rows[i])
			}
		}
		if len(kept) > 0 {
			more, err := fn(kept)
			if err != nil || !more {
				return false, err
			}
		}
		if len(rows) < page {
			return true, nil
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
	}
}

// count counts the events of sel: one statement a part, or, for the part
// classified here, a walk of the DEAD index's ranges that hold its rows
// (unrecorded).
func count(ctx context.Context, a ferrystore.Admin, sel selection) (int64, error) {
	var n int64
	for _, p := range sel.parts {
		if p.class == "" && byIndex(p.f) {
			// A class of a destination: the groups of its GROUP BY.
			groups, all, err := classGroups(ctx, a, p.f)
			if err != nil {
				return 0, err
			}
			if all {
				for _, g := range groups {
					n += g.Count
				}
				continue
			}
		}
		if p.class == "" {
			c, err := a.Count(ctx, p.f)
			if err != nil {
				return 0, err
			}
			n += c
			continue
		}
		parts, err := unrecorded(ctx, a, p)
		if err != nil {
			return 0, err
		}
		for _, q := range parts {
			_, err := walkPart(ctx, a, q, walkPage, readState, func(rows []ferrystore.Row) (bool, error) {
				n += int64(len(rows))
				return true, nil
			})
			if err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// byIndex reports whether f selects settled rows of a recorded error class
// by destination (and type) and nothing else: what GroupErrors counts from
// the DEAD index alone, in groups that add up to the count.
func byIndex(f ferrystore.Filter) bool {
	g := ferrystore.Filter{Statuses: f.Statuses, Destination: f.Destination, Type: f.Type, ErrorClass: f.ErrorClass}
	if f.ErrorClass == "" || f.Destination == "" || fmt.Sprintf("%#v", g) != fmt.Sprintf("%#v", f) {
		return false
	}
	for _, st := range f.Statuses {
		if st != ferrytype.StatusDead && st != ferrytype.StatusDiscarded {
			return false
		}
	}
	return true
}

// rangeCost is what unrecorded counts a statement as, in rows read: its
// round trip and its plan.
const rangeCost = 100

// unrecorded returns the parts that read the rows of p, a part of rows
// without a recorded class (Filter.Unclassified), through the DEAD index:
// one per destination and event type in which the index holds entries
// without a class, each a range of it, (status, destination, error_class
// IS NULL, type), that holds those entries only, whatever the number of
// classified rows beside them. One GROUP BY over the index alone
// (ferrystore.Admin.GroupErrors, by Statuses, and Destination and Type
// when p has them) finds the pairs; so rows without a class cost that
// statement and themselves, never a read of every row. p is returned as
// it is when it is one range already, or found by key (ids, aggregate).
func unrecorded(ctx context.Context, a ferrystore.Admin, p part) ([]part, error) {
	f := p.f
	if f.Destination != "" && f.Type != "" || len(f.IDs) > 0 || f.AggregateID != "" {
		return []part{p}, nil
	}
	groups, err := a.GroupErrors(ctx, ferrystore.Filter{Statuses: f.Statuses, Destination: f.Destination, Type: f.Type})
	if err != nil {
		return nil, err
	}
	return unrecordedIn(p, groups), nil
}

// unrecordedIn returns the parts of p as unrecorded does, from groups:
// GroupErrors of a filter that p's (Unclassified aside) narrows, whose
// groups with ErrorClass "" count the entries without a class; none when
// there are none. There is no bound on the number of ranges: each costs a
// statement, counted as rangeCost rows read, and its rows once for each
// page of the walk (PostgreSQL and SQLite sort a range's rows after the
// cursor for every page: error_class IS NULL gives no order). p itself, a
// walk of every row of its statuses, is returned instead when that reads
// less than the ranges would (many rows without a class, as in a large
// table before ClassifyErrors ran), and when groups were cut at
// ferrystore.MaxErrorGroups, for the groups left out may have such rows.
func unrecordedIn(p part, groups []ferrystore.ErrorGroup) []part {
	if len(groups) >= ferrystore.MaxErrorGroups {
		return []part{p}
	}
	var (
		out         []part
		rows, reads int64 // the rows of p; what its ranges read
	)
	for _, g := range groups {
		rows += g.Count
		if g.ErrorClass != "" {
			continue
		}
		q := p
		q.f.Destination, q.f.Type = g.Destination, g.Type
		out = append(out, q)
		reads += rangeCost + g.Count*((g.Count+walkPage-1)/walkPage)
	}
	if reads > rows {
		return []part{p}
	}
	return out
}

// maxSplit bounds the parts split makes of one part.
const maxSplit = 100

// split replaces each part of sel that selects a recorded error class by
// one part per destination and event type the database finds in it
// (ferrystore.Admin.GroupErrors, at most maxSplit), each of which the DEAD
// index holds in created_at order: a walk over a part of many types would
// otherwise sort the whole part for every page. A part of rows without a
// recorded class becomes the index ranges that hold them (unrecorded).
func split(ctx context.Context, a ferrystore.Admin, sel selection) (selection, error) {
	var out selection
	for _, p := range sel.parts {
		if p.f.Unclassified {
			parts, err := unrecorded(ctx, a, p)
			if err != nil {
				return out, err
			}
			out.parts = append(out.parts, parts...)
			continue
		}
		if p.f.ErrorClass == "" || p.f.Destination != "" && p.f.Type != "" {
			out.parts = append(out.parts, p)
			continue
		}
		groups, all, err := classGroups(ctx, a, p.f)
		if err != nil {
			return out, err
		}
		if len(groups) > maxSplit || !all {
			out.parts = append(out.parts, p)
			continue
		}
		for _, g := range groups {
			q := p
			q.f.Destination, q.f.Type = g.Destination, g.Type
			out.parts = append(out.parts, q)
		}
	}
	return out, nil
}

// classGroups returns the groups of f's error class, f.ErrorClass set:
// those of GroupErrors of f without its class, which a selection's part of
// rows without a recorded class asks too (unrecorded), so that with
// groupCache one GROUP BY serves both.
// It says whether they are all of them (GroupErrors was not cut at
// ferrystore.MaxErrorGroups).
func classGroups(ctx context.Context, a ferrystore.Admin, f ferrystore.Filter) ([]ferrystore.ErrorGroup, bool, error) {
	class := f.ErrorClass
	f.ErrorClass = ""
	all, err := a.GroupErrors(ctx, f)
	if err != nil {
		return nil, false, err
	}
	var out []ferrystore.ErrorGroup
	for _, g := range all {
		if g.ErrorClass == class {
			out = append(out, g)
		}
	}
	return out, len(all) < ferrystore.MaxErrorGroups, nil
}

// groupCache is an Admin whose GroupErrors answers a filter it was asked
// before from its first answer: the statements of one bulk run's start
// (its count, its split, its preview) ask the same groups of the same
// instant, and each is a pass over the DEAD index.
type groupCache struct {
	ferrystore.Admin
	groups map[string][]ferrystore.ErrorGroup
}

func cacheGroups(a ferrystore.Admin) *groupCache {
	return &groupCache{Admin: a, groups: map[string][]ferrystore.ErrorGroup{}}
}

func (c *groupCache) GroupErrors(ctx context.Context, f ferrystore.Filter) ([]ferrystore.ErrorGroup, error) {
	k := fmt.Sprintf("%#v", f)
	if g, ok := c.groups[k]; ok {
		return g, nil
	}
	g, err := c.Admin.GroupErrors(ctx, f)
	if err == nil {
		c.groups[k] = g
	}
	return g, err
}

// first returns up to limit events of sel, oldest first across its parts,
// and whether there are more.
func first(ctx context.Context, a ferrystore.Admin, sel selection, limit int, cols columns) ([]ferrystore.Row, bool, error) {
	sel, err := split(ctx, a, sel)
	if err != nil {
		return nil, false, err
	}
	var rows []ferrystore.Row
	for _, p := range sel.parts {
		page := limit + 1 // one more tells whether there are more
		if p.class != "" || page > ferrystore.MaxListLimit {
			page = ferrystore.MaxListLimit
		}
		var got []ferrystore.Row
		_, err := walkPart(ctx, a, p, page, cols, func(r []ferrystore.Row) (bool, error) {
			got = append(got, r...)
			return len(got) <= limit, nil
		})
		if err != nil {
			return nil, false, err
		}
		rows = append(rows, got...)
	}
	if len(sel.parts) > 1 {
		sort.SliceStable(rows, func(i, j int) bool {
			x, y := &rows[i], &rows[j]
			if !x.CreatedAt.Equal(y.CreatedAt) {
				return x.CreatedAt.Before(y.CreatedAt)
			}
			return x.ID < y.ID
		})
	}
	if len(rows) > limit {
		return rows[:limit], true, nil
	}
	return rows, false, nil
}

// list returns up to limit events of sel, oldest first, and whether there
// are more.
func list(ctx context.Context, a ferrystore.Admin, f DeadFilter, status ferrytype.Status, limit int) (DeadList, error) {
	if limit < 1 || limit > ferrystore.MaxListLimit {
		return DeadList{Events: []Event{}}, invalid("limit %d must be within 1..%d", limit, ferrystore.MaxListLimit)
	}
	sel, err := f.selection(status)
	if err != nil {
		return DeadList{Events: []Event{}}, err
	}
	rows, more, err := first(ctx, a, sel, limit, readAll)
	if err != nil {
		return DeadList{Events: []Event{}}, err
	}
	return DeadList{Events: eventsOf(rows, false), More: more}, nil
}

// DeadList is a page of DEAD (or DISCARDED) events, oldest first.
type DeadList struct {
	Events []Event `json:"events"`
	// More reports that more events match than were listed.
	More bool `json:"more"`
}

// ListDead lists up to limit (1 to ferrystore.MaxListLimit) DEAD events
// matching f, oldest first, and says whether there are more. Events are
// listed without headers and payload (GetEvents has them).
func ListDead(ctx context.Context, a ferrystore.Admin, f DeadFilter, limit int) (DeadList, error) {
	if err := needStore("ListDead", a); err != nil {
		return DeadList{}, err
	}
	return list(ctx, a, f, ferrytype.StatusDead, limit)
}

// ListDiscarded lists up to limit (1 to ferrystore.MaxListLimit) DISCARDED
// events matching f, oldest first (by creation), as ListDead does: each
// with DiscardedAt and DiscardReason, which holds the reason, who and when
// (and, for an event restored and discarded again, each step).
func ListDiscarded(ctx context.Context, a ferrystore.Admin, f DeadFilter, limit int) (DeadList, error) {
	if err := needStore("ListDiscarded", a); err != nil {
		return DeadList{}, err
	}
	return list(ctx, a, f, ferrytype.StatusDiscarded, limit)
}

// CountDead counts the DEAD events matching f: with one statement, or,
// when f has an ErrorClass, by reading the selection's rows a page at a
// time.
func CountDead(ctx context.Context, a ferrystore.Admin, f DeadFilter) (int64, error) {
	if err := needStore("CountDead", a); err != nil {
		return 0, err
	}
	sel, err := f.selection(ferrytype.StatusDead)
	if err != nil {
		return 0, err
	}
	return count(ctx, a, sel)
}

// EventDetail is one event in full, as GetEvents returns it.
type EventDetail struct {
	Event
	// HoldsBack counts, for a DEAD event of an aggregate, the later NEW
	// events of that aggregate that an ordered relay holds back until it
	// is retried or discarded (at most ferrystore.MaxListLimit are
	// counted). Nil for other events.
	HoldsBack *int `json:"holds_back,omitempty"`
}

// EventsFound is what GetEvents found.
type EventsFound struct {
	// Events are the events found, in the order asked, with headers and
	// payload.
	Events []EventDetail `json:"events"`
	// Missing are the ids without an event.
	Missing []string `json:"missing"`
}

// GetEvents reads events of any status in full, at most
// ferrystore.MaxListLimit ids at once. An unknown id is reported in
// Missing, not as an error.
func GetEvents(ctx context.Context, a ferrystore.Admin, ids []string) (EventsFound, error) {
	if err := needStore("GetEvents", a); err != nil {
		return EventsFound{}, err
	}
	found := EventsFound{Events: []EventDetail{}, Missing: []string{}}
	if len(ids) > ferrystore.MaxListLimit {
		return found, invalid("%d ids, at most %d at once", len(ids), ferrystore.MaxListLimit)
	}
	for _, id := range ids {
		r, err := a.Get(ctx, id)
		if errors.Is(err, ferrytype.ErrNotFound) {
			found.Missing = append(found.Missing, id)
			continue
		}
		if err != nil {
			return found, err
		}
		d := EventDetail{Event: EventOf(r, true)}
		if r.Status == ferrytype.StatusDead && r.AggregateID != "" {
			n, err := heldBack(ctx, a, r)
			if err != nil {
				return found, err
			}
			d.HoldsBack = &n
		}
		found.Events = append(found.Events, d)
	}
	return found, nil
}

// heldBack counts the NEW events of r's aggregate after r.
func heldBack(ctx context.Context, a ferrystore.Admin, r ferrystore.Row) (int, error) {
	rows, err := a.List(ctx, ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusNew},
		AggregateType: r.AggregateType, AggregateID: r.AggregateID, Limit: ferrystore.MaxListLimit})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, x := range rows {
		if x.Sequence > r.Sequence {
			n++
		}
	}
	return n, nil
}

// BulkOptions selects the events RetryDead, DiscardDead and
// RestoreDiscarded act on, and bounds the run.
type BulkOptions struct {
	// Filter selects the events.
	Filter DeadFilter
	// All must be set to act on every event of the status when Filter
	// selects nothing, so that an empty filter never acts on everything by
	// mistake.
	All bool
	// Batch is the most events changed per statement, 1 to
	// ferrystore.MaxListLimit. Default (zero) DefaultBulkBatch.
	Batch int
	// Page is the most events read per page of the run's walk over the
	// selection (rows without payload), 1 to ferrystore.MaxStateListLimit.
	// Default (zero) ferrystore.MaxStateListLimit.
	Page int
	// Max is the most events one run acts on; the result says how many
	// matched and were left (BulkResult.Left). Default (zero): no cap,
	// every event that matches.
	Max int
	// DryRun changes nothing: the result counts what would change and
	// holds the first batch of it.
	DryRun bool
	// Progress, when set, is called after each batch with the result so
	// far (Matched is set from the start).
	Progress func(BulkResult)
}

// BulkResult is what RetryDead, DiscardDead or RestoreDiscarded did. When
// the run ends early on an error, it says what was done before it.
type BulkResult struct {
	// Action is "retry", "discard" or "restore".
	Action string `json:"action"`
	DryRun bool   `json:"dry_run"`
	// Matched counts the events that matched when the run started (a count
	// before the first batch), Filter.DiedBy aside when the run acts: the
	// events that bound leaves out count in Later.
	Matched int64 `json:"matched"`
	// Changed counts the rows the store changed. In a dry run, the events
	// that would change: Matched, or Max when it is lower. Events that
	// come to match during the run (a DEAD event that died after the
	// count) are acted on too, so Changed may exceed Matched.
	Changed int64 `json:"changed"`
	// Skipped counts the events selected but left alone by their batch's
	// statement, conditional on the status: another operator or a relay
	// had changed them since they were listed.
	Skipped int64 `json:"skipped"`
	// Left counts, when Max stopped the run, the events that still match
	// beyond the last one it acted on (a count after the run); in a dry
	// run, Matched less Changed. Zero when the run completed.
	Left int64 `json:"left"`
	// Complete is true when the run reached the end of the selection:
	// every event that matched was acted on, or left alone for the reason
	// Skipped gives. False when Max stopped it or an error ended it.
	Complete bool `json:"complete"`
	// IDs are the first MaxBulkIDs events acted on, in order (in a dry
	// run, those of Preview); Changed + Skipped counts them all.
	IDs []string `json:"ids"`
	// Batches counts the statements that changed rows.
	Batches int `json:"batches"`
	// Audit is the text stored with the events: the discard reason, or the
	// restore note, with who and when.
	Audit string `json:"audit,omitempty"`
	// Preview holds, in a dry run, the first events that would change (at
	// most a batch).
	Preview []Event `json:"preview,omitempty"`
	// At is, for DEAD events, the instant of the database clock the run's
	// selection is bound to: read just before the count, or
	// Filter.DiedBy when set. A dry run's At, given as DeadFilter.DiedBy
	// to the action it previews, makes the action act on the events the
	// dry run counted and on none that died after it.
	At time.Time `json:"at,omitzero"`
	// Later counts, when Filter.DiedBy bounds a run that completed, the
	// events of the selection it left alone because they died after that
	// instant (a count after the run); they count in Matched.
	Later int64 `json:"later"`
}

func (o BulkOptions) withDefaults() (BulkOptions, error) {
	if o.Batch == 0 {
		o.Batch = DefaultBulkBatch
	}
	if o.Page == 0 {
		o.Page = walkPage
	}
	switch {
	case o.Batch < 1 || o.Batch > ferrystore.MaxListLimit:
		return o, invalid("BulkOptions.Batch %d must be within 1..%d", o.Batch, ferrystore.MaxListLimit)
	case o.Page < 1 || o.Page > ferrystore.MaxStateListLimit:
		return o, invalid("BulkOptions.Page %d must be within 1..%d", o.Page, ferrystore.MaxStateListLimit)
	case o.Max < 0:
		return o, invalid("BulkOptions.Max %d must not be negative", o.Max)
	case !o.Filter.Selects() && !o.All:
		return o, invalid("BulkOptions.Filter selects nothing and BulkOptions.All is not set")
	}
	return o, nil
}

// RetryDead puts the DEAD events selected by opts back to NEW, available
// at once, attempts 0, same event id: the relay publishes them again and
// consumers recognise the duplicate. It counts the selection first
// (BulkResult.Matched), then walks it oldest first and acts on every event
// that matches, up to opts.Max when set, in statements of opts.Batch
// events, each conditional on the row still being DEAD. The walk goes by
// (created_at, event_id), so an event retried and dead again during the
// run is not met twice. On an error, the result says what was changed
// before it.
func RetryDead(ctx context.Context, a ferrystore.Admin, opts BulkOptions) (BulkResult, error) {
	if err := needStore("RetryDead", a); err != nil {
		return BulkResult{}, err
	}
	return bulk(ctx, a, "retry", ferrytype.StatusDead, opts, a.Retry, "")
}

// DiscardDead marks the DEAD events selected by opts DISCARDED: never
// published, the row kept with an audit text made of reason, actor (who
// decides: LocalActor for a person at a terminal) and the time. Batches
// and bounds are those of RetryDead. reason and actor are required
// unless opts.DryRun.
func DiscardDead(ctx context.Context, a ferrystore.Admin, opts BulkOptions, reason, actor string) (BulkResult, error) {
	if err := needStore("DiscardDead", a); err != nil {
		return BulkResult{}, err
	}
	if !opts.DryRun && (strings.TrimSpace(reason) == "" || strings.TrimSpace(actor) == "") {
		return BulkResult{Action: "discard", IDs: []string{}}, invalid("a discard needs a reason and an actor: they are kept with the events")
	}
	audit := reason + " (by " + actor + " at " + time.Now().UTC().Format(time.RFC3339) + ")"
	return bulk(ctx, a, "discard", ferrytype.StatusDead, opts, func(ctx context.Context, ids []string) (int64, error) {
		return a.Discard(ctx, ids, audit)
	}, audit)
}

// RestoreDiscarded takes the DISCARDED events selected by opts back to
// DEAD (ferrytype.TransitionRestore), for a person to retry or discard
// them again: not to NEW, so that nothing is published before someone
// decides. The discard's record stays: "restored by <actor> at <time>" is
// appended to the discard reason (ferrystore.Admin.Restore), and the
// discard time is cleared. Batches and bounds are those of RetryDead, each
// statement conditional on the row still being DISCARDED. actor is
// required unless opts.DryRun.
func RestoreDiscarded(ctx context.Context, a ferrystore.Admin, opts BulkOptions, actor string) (BulkResult, error) {
	if err := needStore("RestoreDiscarded", a); err != nil {
		return BulkResult{}, err
	}
	if !opts.DryRun && strings.TrimSpace(actor) == "" {
		return BulkResult{Action: "restore", IDs: []string{}}, invalid("a restore needs an actor: it is kept with the events")
	}
	note := "restored by " + actor + " at " + time.Now().UTC().Format(time.RFC3339)
	return bulk(ctx, a, "restore", ferrytype.StatusDiscarded, opts, func(ctx context.Context, ids []string) (int64, error) {
		return a.Restore(ctx, ids, note)
	}, note)
}

func bulk(ctx context.Context, a ferrystore.Admin, verb string, status ferrytype.Status, opts BulkOptions,
	act func(context.Context, []string) (int64, error), audit string) (BulkResult, error) {
	res := BulkResult{Action: verb, DryRun: opts.DryRun, IDs: []string{}, Audit: audit}
	o, err := opts.withDefaults()
	if err != nil {
		return res, err
	}
	sel, err := o.Filter.selection(status)
	if err != nil {
		return res, err
	}
	bound := !o.Filter.DiedBy.IsZero()
	switch {
	case bound:
		res.At = o.Filter.DiedBy
	case status == ferrytype.StatusDead:
		if res.At, err = a.Now(ctx); err != nil {
			return res, fmt.Errorf("%s: %w", verb, err)
		}
	}
	// An action counts its selection without the bound, from the
	// indexes (a count with it reads every row); the walk applies it.
	counted := sel
	if bound && !o.DryRun {
		counted = sel.unbound()
	}
	// The start reads the DEAD index's groups once (groupCache); the count
	// of what the bound left, after the run, reads them again.
	start := cacheGroups(a)
	if res.Matched, err = count(ctx, start, counted); err != nil {
		return res, fmt.Errorf("%s: count the selection: %w", verb, err)
	}
	if o.DryRun {
		return preview(ctx, start, sel, o, res)
	}
	// Split by what the indexes hold, the bound aside, then bound each part.
	if sel, err = split(ctx, start, sel.unbound()); err != nil {
		return res, fmt.Errorf("%s: %w", verb, err)
	}
	for i := range sel.parts {
		sel.parts[i].f.DiedBy = o.Filter.DiedBy
	}
	var (
		limited bool
		cur     int            // the part walked
		last    ferrystore.Row // the last event acted on in it, if any
		acted   = -1           // the part of last
	)
	batches := func(rows []ferrystore.Row) (bool, error) {
		for len(rows) > 0 {
			n := min(len(rows), o.Batch)
			if o.Max > 0 {
				n = int(min(int64(n), int64(o.Max)-res.Changed-res.Skipped))
				if n == 0 {
					limited = true
					return false, nil
				}
			}
			ids := make([]string, n)
			for i := range ids {
				ids[i] = rows[i].ID
			}
			last, acted, rows = rows[n-1], cur, rows[n:]
			changed, err := act(ctx, ids)
			if err != nil {
				return false, err
			}
			res.Changed += changed
			res.Skipped += int64(n) - changed
			res.Batches++
			res.IDs = append(res.IDs, ids[:min(len(ids), MaxBulkIDs-len(res.IDs))]...)
			if o.Progress != nil {
				o.Progress(res)
			}
		}
		return true, nil
	}
	for cur = range sel.parts {
		more, err := walkPart(ctx, a, sel.parts[cur], o.Page, readKeys, batches)
		if err != nil {
			return res, fmt.Errorf("%s after %d of %s: %w", verb, res.Changed, Plural(res.Matched, "event"), err)
		}
		if !more {
			break
		}
	}
	// The database's counts after a large change (the overview's, and the
	// two below) are as fast as before it.
	if err := a.AfterBulk(ctx, res.Changed); err != nil {
		return res, fmt.Errorf("%s: %s changed; then: %w", verb, Plural(res.Changed, "event"), err)
	}
	if limited { // what matches beyond the last event acted on
		left := selection{parts: append([]part(nil), sel.parts[cur:]...)}
		if acted == cur {
			left.parts[0].f.After = ferrystore.ListCursorOf(last)
		}
		if res.Left, err = count(ctx, a, left); err != nil {
			return res, fmt.Errorf("%s: count what is left: %w", verb, err)
		}
	}
	res.Complete = !limited
	if bound && res.Complete { // what the bound left: it died after
		if res.Later, err = count(ctx, a, sel.unbound()); err != nil {
			return res, fmt.Errorf("%s: count the events that died after %s: %w", verb, o.Filter.DiedBy.Format(time.RFC3339Nano), err)
		}
	}
	return res, nil
}

// unbound returns sel without Filter.DiedBy.
func (sel selection) unbound() selection {
	out := selection{parts: append([]part(nil), sel.parts...)}
	for i := range out.parts {
		out.parts[i].f.DiedBy = time.Time{}
	}
	return out
}

// preview fills a dry run's result: the count, and the first batch.
func preview(ctx context.Context, a ferrystore.Admin, sel selection, o BulkOptions, res BulkResult) (BulkResult, error) {
	res.Changed = res.Matched
	if o.Max > 0 && res.Changed > int64(o.Max) {
		res.Changed = int64(o.Max)
	}
	res.Left = res.Matched - res.Changed
	res.Complete = res.Left == 0
	want := o.Batch
	if o.Max > 0 {
		want = min(want, o.Max)
	}
	rows, _, err := first(ctx, a, sel, want, readAll)
	if err != nil {
		return res, fmt.Errorf("%s: preview: %w", res.Action, err)
	}
	res.Preview = eventsOf(rows, false)
	for _, r := range rows {
		res.IDs = append(res.IDs, r.ID)
	}
	return res, nil
}

// LocalActor names the person running this process, user@host, for the
// audit trail of DiscardDead and ResolveConflicts.
func LocalActor() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

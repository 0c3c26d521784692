package ferryadmin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// Defaults of BulkOptions.
const (
	DefaultBulkBatch = 500
	DefaultBulkMax   = 10000
)

// DeadFilter selects DEAD events. Empty fields do not filter; an empty
// filter selects every DEAD event.
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
	// MaxAge keeps events created at most this long ago, MinAge events
	// created at least this long ago, by the database clock. Zero: no
	// bound.
	MaxAge, MinAge time.Duration
}

// Selects reports whether f narrows the selection at all.
func (f *DeadFilter) Selects() bool {
	return len(f.ids()) > 0 || f.AggregateID != "" || f.Type != "" || f.Destination != "" || f.MaxAge > 0 || f.MinAge > 0
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

// store returns the store filter of f, validated.
func (f *DeadFilter) store(limit int) (ferrystore.Filter, error) {
	sf := ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusDead}, Limit: limit, IDs: f.ids(),
		AggregateType: f.AggregateType, AggregateID: f.AggregateID, Type: f.Type, Destination: f.Destination,
		MinAge: f.MinAge, MaxAge: f.MaxAge}
	if f.AggregateType != "" && f.AggregateID == "" {
		return sf, invalid("DeadFilter.AggregateType %q without an AggregateID", f.AggregateType)
	}
	if err := sf.Validate(); err != nil {
		return sf, err
	}
	return sf, nil
}

// DeadList is a page of DEAD events, oldest first.
type DeadList struct {
	Events []Event `json:"events"`
	// More reports that more events match than were listed.
	More bool `json:"more"`
}

// ListDead lists up to limit (1 to ferrystore.MaxListLimit) DEAD events
// matching f, oldest first, and says whether there are more. Events are
// listed without headers and payload (GetEvents has them).
func ListDead(ctx context.Context, a ferrystore.Admin, f DeadFilter, limit int) (DeadList, error) {
	if limit < 1 || limit > ferrystore.MaxListLimit {
		return DeadList{}, invalid("limit %d must be within 1..%d", limit, ferrystore.MaxListLimit)
	}
	sf, err := f.store(limit)
	if err != nil {
		return DeadList{}, err
	}
	sf.Limit = limit + 1 // one more tells whether there are more
	rows, err := a.List(ctx, sf)
	if err != nil {
		return DeadList{}, err
	}
	l := DeadList{More: len(rows) > limit}
	if l.More {
		rows = rows[:limit]
	}
	l.Events = eventsOf(rows, false)
	return l, nil
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

// BulkOptions selects the DEAD events RetryDead and DiscardDead act on,
// and bounds the run.
type BulkOptions struct {
	// Filter selects the events.
	Filter DeadFilter
	// All must be set to act on every DEAD event when Filter selects
	// nothing, so that an empty filter never acts on everything by mistake.
	All bool
	// Batch is the most events listed and changed per statement, 1 to
	// ferrystore.MaxListLimit. Default (zero) DefaultBulkBatch.
	Batch int
	// Max is the most events one run changes. Default (zero)
	// DefaultBulkMax.
	Max int
	// DryRun changes nothing: the result holds the first batch that would
	// be changed.
	DryRun bool
	// Progress, when set, is called after each batch with the result so
	// far.
	Progress func(BulkResult)
}

// BulkResult is what RetryDead or DiscardDead did.
type BulkResult struct {
	// Action is "retry" or "discard".
	Action string `json:"action"`
	DryRun bool   `json:"dry_run"`
	// Changed counts the rows the store changed: a row that stopped being
	// DEAD between its listing and the change is left alone and not
	// counted. In a dry run, the events that would change.
	Changed int64 `json:"changed"`
	// IDs are the events selected and acted on (or, in a dry run, that
	// would be).
	IDs []string `json:"ids"`
	// Batches counts the statements that changed rows.
	Batches int `json:"batches"`
	// Audit is the text stored with discarded events: the reason, who,
	// and when.
	Audit string `json:"audit,omitempty"`
	// Preview holds, in a dry run, the events that would change.
	Preview []Event `json:"preview,omitempty"`
}

func (o BulkOptions) withDefaults() (BulkOptions, error) {
	if o.Batch == 0 {
		o.Batch = DefaultBulkBatch
	}
	if o.Max == 0 {
		o.Max = DefaultBulkMax
	}
	switch {
	case o.Batch < 1 || o.Batch > ferrystore.MaxListLimit:
		return o, invalid("BulkOptions.Batch %d must be within 1..%d", o.Batch, ferrystore.MaxListLimit)
	case o.Max < 1:
		return o, invalid("BulkOptions.Max %d must be positive", o.Max)
	case !o.Filter.Selects() && !o.All:
		return o, invalid("BulkOptions.Filter selects nothing and BulkOptions.All is not set")
	}
	return o, nil
}

// RetryDead puts the DEAD events selected by opts back to NEW, available
// at once, attempts 0, same event id: the relay publishes them again and
// consumers recognise the duplicate. It works in batches of opts.Batch,
// each one statement conditional on the row still being DEAD, up to
// opts.Max events. On an error, the result says what was changed before
// it.
func RetryDead(ctx context.Context, a ferrystore.Admin, opts BulkOptions) (BulkResult, error) {
	return bulk(ctx, a, "retry", opts, func(ids []string) (int64, error) { return a.Retry(ctx, ids) }, "")
}

// DiscardDead marks the DEAD events selected by opts DISCARDED: never
// published, the row kept with an audit text made of reason, actor (who
// decides: LocalActor for a person at a terminal) and the time. Batches
// and bounds are those of RetryDead. reason and actor are required
// unless opts.DryRun.
func DiscardDead(ctx context.Context, a ferrystore.Admin, opts BulkOptions, reason, actor string) (BulkResult, error) {
	if !opts.DryRun && (strings.TrimSpace(reason) == "" || strings.TrimSpace(actor) == "") {
		return BulkResult{Action: "discard", IDs: []string{}}, invalid("a discard needs a reason and an actor: they are kept with the events")
	}
	audit := reason + " (by " + actor + " at " + time.Now().UTC().Format(time.RFC3339) + ")"
	return bulk(ctx, a, "discard", opts, func(ids []string) (int64, error) { return a.Discard(ctx, ids, audit) }, audit)
}

func bulk(ctx context.Context, a ferrystore.Admin, verb string, opts BulkOptions, act func([]string) (int64, error),
	audit string) (BulkResult, error) {
	res := BulkResult{Action: verb, DryRun: opts.DryRun, IDs: []string{}, Audit: audit}
	o, err := opts.withDefaults()
	if err != nil {
		return res, err
	}
	f, err := o.Filter.store(o.Batch)
	if err != nil {
		return res, err
	}
	seen := map[string]bool{}
	for len(res.IDs) < o.Max {
		f.Limit = min(o.Batch, o.Max-len(res.IDs))
		rows, err := a.List(ctx, f)
		if err != nil {
			return res, err
		}
		if len(rows) == 0 {
			break
		}
		ids := make([]string, 0, len(rows))
		for _, r := range rows {
			if !seen[r.ID] {
				seen[r.ID] = true
				ids = append(ids, r.ID)
			}
		}
		if len(ids) == 0 {
			break // only events this run already changed, dead again: stop
		}
		if o.DryRun {
			res.IDs = append(res.IDs, ids...)
			res.Preview = append(res.Preview, eventsOf(rows, false)...)
			break // the same rows would come back: one page is the preview
		}
		n, err := act(ids)
		if err != nil {
			return res, fmt.Errorf("%s after %d events: %w", verb, len(res.IDs), err)
		}
		res.Changed += n
		res.Batches++
		res.IDs = append(res.IDs, ids...)
		if o.Progress != nil {
			o.Progress(res)
		}
		if len(rows) < f.Limit || len(f.IDs) > 0 {
			break
		}
	}
	if o.DryRun {
		res.Changed = int64(len(res.IDs))
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

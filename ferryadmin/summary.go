package ferryadmin

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// MaxDeadGroups bounds DeadSummary.Groups.
const MaxDeadGroups = 200

// maxTrackedGroups bounds the groups SummarizeDead counts at once: the
// events of further groups count in the total only.
const maxTrackedGroups = 10000

// maxGroupTypes bounds DeadGroup.Types.
const maxGroupTypes = 10

// maxSampleError bounds DeadGroup.SampleError, in bytes.
const maxSampleError = 2000

// DeadGroup is the DEAD events of one destination that failed with one
// class of error (ErrorClass).
type DeadGroup struct {
	// Destination is where the events are published: their destination,
	// or their type when they have none.
	Destination string `json:"destination"`
	// ErrorClass is the class of their last errors.
	ErrorClass string `json:"error_class"`
	// Count counts the events.
	Count int64 `json:"count"`
	// Types are their event types, sorted; at most 10.
	Types []string `json:"types"`
	// Oldest and Newest are the creation times of the oldest and newest.
	Oldest time.Time `json:"oldest"`
	Newest time.Time `json:"newest"`
	// SampleID and SampleError are the oldest event's id and last error
	// (folded to one line, at most 2000 bytes).
	SampleID    string `json:"sample_id"`
	SampleError string `json:"sample_error"`
}

// Filter selects the group's events among all DEAD events: DeadFilter{
// Destination, ErrorClass}. RetryDead or DiscardDead with it act on
// exactly the group's events (and on those that join the group in the
// meantime). A summary taken with a narrower filter needs that filter's
// other fields added to stay within it.
func (g *DeadGroup) Filter() DeadFilter {
	return DeadFilter{Destination: g.Destination, ErrorClass: g.ErrorClass}
}

// DeadSummary is the DEAD events grouped by destination and error class.
type DeadSummary struct {
	// Groups are the largest groups first (then the oldest), at most
	// MaxDeadGroups.
	Groups []DeadGroup `json:"groups"`
	// Total counts the DEAD events matching the filter.
	Total int64 `json:"total"`
	// Truncated is true when there were more groups than Groups holds; the
	// groups' counts then add up to less than Total.
	Truncated bool `json:"truncated"`
}

// SummarizeDead groups the DEAD events matching f by destination and
// ErrorClass of their last error, as ServicePulse groups failed messages,
// so that a person sees at a glance the few causes behind many events and
// acts on each (DeadGroup.Filter). The database counts the groups
// (ferrystore.Admin.GroupErrors: over the DEAD index alone for a filter of
// destination and class, exact at any number of events) and gives each
// group's oldest event. Events without a recorded class (they failed
// before the table had migration 0004, or were written by an older relay
// since) are read (without payload) and classified here: only those, from
// the DEAD index's entries without a class, one range per destination and
// type where that count found some, so that they cost the count and
// themselves, not a read of every DEAD event. Every DEAD event of f is
// read instead when that reads less (many events without a class, as
// before ClassifyErrors ran), and when the count was cut at 10,000 groups
// (where the others are is then unknown). At most 10,000 groups are
// counted (the events of others count in Total, and Truncated is set).
func SummarizeDead(ctx context.Context, a ferrystore.Admin, f DeadFilter) (DeadSummary, error) {
	if err := needStore("SummarizeDead", a); err != nil {
		return DeadSummary{}, err
	}
	sum := DeadSummary{Groups: []DeadGroup{}}
	sel, err := f.selection(ferrytype.StatusDead)
	if err != nil {
		return sum, err
	}
	type key struct{ dest, class string }
	groups := map[key]*DeadGroup{}
	add := func(k key, n int64, typ string, oldest, newest time.Time) *DeadGroup {
		sum.Total += n
		g := groups[k]
		if g == nil {
			if len(groups) >= maxTrackedGroups {
				sum.Truncated = true
				return nil
			}
			g = &DeadGroup{Destination: k.dest, ErrorClass: k.class, Types: []string{}, Oldest: oldest}
			groups[k] = g
		}
		g.Count += n
		if oldest.Before(g.Oldest) {
			g.Oldest, g.SampleID, g.SampleError = oldest, "", ""
		}
		if newest.After(g.Newest) {
			g.Newest = newest
		}
		if len(g.Types) < maxGroupTypes && !contains(g.Types, typ) {
			g.Types = append(g.Types, typ)
		}
		return g
	}
	var classless []part                      // the ranges of the rows without a recorded class
	cut := false                              // more groups than GroupErrors returns
	recorded := map[key][]ferrystore.Filter{} // each group's ranges of the DEAD index
	for _, p := range sel.parts {
		if p.class != "" { // no class recorded: f's class, classified here
			parts, err := unrecorded(ctx, a, p)
			if err != nil {
				return sum, err
			}
			classless = append(classless, parts...)
			continue
		}
		counts, err := a.GroupErrors(ctx, p.f)
		if err != nil {
			return sum, err
		}
		for _, c := range counts {
			if c.ErrorClass == "" { // read below
				continue
			}
			k := key{c.Destination, c.ErrorClass}
			if add(k, c.Count, c.Type, c.Oldest, c.Newest) != nil {
				r := p.f
				r.Destination, r.Type, r.ErrorClass = c.Destination, c.Type, c.ErrorClass
				recorded[k] = append(recorded[k], r)
			}
		}
		cut = cut || len(counts) == ferrystore.MaxErrorGroups
		if p.f.ErrorClass == "" { // f has no class: its rows without one, where counted
			q := p
			q.f.Unclassified = true
			classless = append(classless, unrecordedIn(q, counts)...)
		}
	}
	for _, p := range classless {
		_, err = walkPart(ctx, a, p, walkPage, readState, func(rows []ferrystore.Row) (bool, error) {
			for i := range rows {
				r := &rows[i]
				g := add(key{r.Route(), ErrorClass(r.LastError)}, 1, r.Type, r.CreatedAt, r.CreatedAt)
				if g != nil && g.SampleID == "" && r.CreatedAt.Equal(g.Oldest) { // the oldest so far
					g.SampleID, g.SampleError = r.ID, OneLine(r.LastError, maxSampleError)
				}
			}
			return true, nil
		})
		if err != nil {
			return sum, err
		}
	}
	if cut { // the groups read count less than the total
		sum.Truncated = true
		if sum.Total, err = count(ctx, a, sel); err != nil {
			return sum, err
		}
	}
	for _, g := range groups {
		sort.Strings(g.Types)
		sum.Groups = append(sum.Groups, *g)
	}
	sort.Slice(sum.Groups, func(i, j int) bool {
		x, y := &sum.Groups[i], &sum.Groups[j]
		switch {
		case x.Count != y.Count:
			return x.Count > y.Count
		case !x.Oldest.Equal(y.Oldest):
			return x.Oldest.Before(y.Oldest)
		case x.Destination != y.Destination:
			return x.Destination < y.Destination
		}
		return x.ErrorClass < y.ErrorClass
	})
	if len(sum.Groups) > MaxDeadGroups {
		sum.Groups, sum.Truncated = sum.Groups[:MaxDeadGroups], true
	}
	// Each group's oldest event, where the database counted it: the first
	// entry of one of its ranges of the DEAD index.
	for i := range sum.Groups {
		g := &sum.Groups[i]
		if g.SampleID != "" {
			continue
		}
		var gsel selection
		for _, f := range recorded[key{g.Destination, g.ErrorClass}] {
			gsel.parts = append(gsel.parts, part{f: f})
		}
		rows, _, err := first(ctx, a, gsel, 1, readState)
		if err != nil {
			return sum, err
		}
		if len(rows) == 1 {
			g.SampleID, g.SampleError = rows[0].ID, OneLine(rows[0].LastError, maxSampleError)
		}
	}
	return sum, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ClassifyErrors records the error class of the DEAD and DISCARDED events
// without one (ferrystore.Admin.SetErrorClass): those that failed before
// the table had migration 0004, or that a relay of an older version
// recorded since, during a rolling upgrade. So the database groups and
// selects them as it does the others instead of ferryadmin reading and
// classifying them each time. For each status, one GROUP BY over the DEAD
// index finds the destinations and types that have such events, and only
// those events are read (without payload, a page at a time) through the
// index's entries without a class; every event of the status is read
// instead when that reads less, as when most have none on the first run
// after the migration. It returns how many it classified; ferry migrate
// runs it after migrating, and a second run finds none.
func ClassifyErrors(ctx context.Context, a ferrystore.Admin) (int64, error) {
	if err := needStore("ClassifyErrors", a); err != nil {
		return 0, err
	}
	var n int64
	for _, status := range []ferrytype.Status{ferrytype.StatusDead, ferrytype.StatusDiscarded} {
		parts, err := unrecorded(ctx, a, part{f: ferrystore.Filter{Statuses: []ferrytype.Status{status}, Unclassified: true}})
		if err != nil {
			return n, fmt.Errorf("classify the errors of %s events: %w", status, err)
		}
		for _, p := range parts {
			if err := classify(ctx, a, p, &n); err != nil {
				return n, fmt.Errorf("classify the errors of %s events: %w", status, err)
			}
		}
	}
	return n, nil
}

// classify records the class of the rows of p, adding to n the rows
// changed.
func classify(ctx context.Context, a ferrystore.Admin, p part, n *int64) error {
	_, err := walkPart(ctx, a, p, walkPage, readState, func(rows []ferrystore.Row) (bool, error) {
		byClass := map[string][]string{}
		for i := range rows {
			c := ErrorClass(rows[i].LastError)
			byClass[c] = append(byClass[c], rows[i].ID)
		}
		for c, ids := range byClass {
			for len(ids) > 0 {
				k := min(len(ids), ferrystore.MaxListLimit)
				changed, err := a.SetErrorClass(ctx, c, ids[:k])
				if err != nil {
					return false, err
				}
				*n += changed
				ids = ids[k:]
			}
		}
		return true, nil
	})
	return err
}

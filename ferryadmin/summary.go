package ferryadmin

import (
	"context"
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
// acts on each (DeadGroup.Filter). It reads the selection's rows without
// their payload, ferrystore.MaxStateListLimit at a time, never all at once; at
// most 10,000 groups are counted (the events of others count in Total,
// and Truncated is set).
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
	err = walk(ctx, a, sel, walkPage, true, func(rows []ferrystore.Row) (bool, error) {
		for i := range rows {
			r := &rows[i]
			sum.Total++
			k := key{r.Route(), ErrorClass(r.LastError)}
			g := groups[k]
			if g == nil {
				if len(groups) >= maxTrackedGroups {
					sum.Truncated = true
					continue
				}
				g = &DeadGroup{Destination: k.dest, ErrorClass: k.class, Types: []string{}, Oldest: r.CreatedAt,
					SampleID: r.ID, SampleError: OneLine(r.LastError, maxSampleError)}
				groups[k] = g
			}
			g.Count++
			if r.CreatedAt.Before(g.Oldest) {
				g.Oldest = r.CreatedAt
			}
			if r.CreatedAt.After(g.Newest) {
				g.Newest = r.CreatedAt
			}
			if len(g.Types) < maxGroupTypes && !contains(g.Types, r.Type) {
				g.Types = append(g.Types, r.Type)
			}
		}
		return true, nil
	})
	if err != nil {
		return sum, err
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

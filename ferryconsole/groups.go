package ferryconsole

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferryadmin"
)

// groupsPage is the DEAD events grouped by destination and error class.
type groupsPage struct {
	Kind, Name string
	Filter     filterForm
	Filtered   bool
	Summary    ferryadmin.DeadSummary
	// Groups are the summary's groups, each with its filter.
	Groups []groupRow
}

func (p groupsPage) title() string { return "DEAD groups " + p.Kind + " " + p.Name }

// groupRow is one group and the filter that selects exactly its events
// within the page's filter.
type groupRow struct {
	ferryadmin.DeadGroup
	Filter filterForm
}

func (h *console) groups(w http.ResponseWriter, r *http.Request) {
	kind, name, a, ok := h.table(w, r)
	if !ok {
		return
	}
	f, ff, err := parseDeadFilter(r.URL.Query())
	if err != nil {
		h.badInput(w, r, "Filter: %v.", err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.RunTimeout)
	defer cancel()
	sum, err := ferryadmin.SummarizeDead(ctx, a, f)
	if err != nil {
		h.failed(w, r, "grouping DEAD events", err)
		return
	}
	p := groupsPage{Kind: kind, Name: name, Filter: ff, Filtered: f.Selects(), Summary: sum}
	for _, g := range sum.Groups {
		gf := ff
		gf.Destination, gf.Class = g.Destination, g.ErrorClass
		p.Groups = append(p.Groups, groupRow{DeadGroup: g, Filter: gf})
	}
	h.page(w, r, "groups", p)
}

// groupAction acts on every DEAD event a group's filter selects (the
// form's filter fields, a class required), with no cap: the result has the
// true totals.
func (h *console) groupAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		kind, name, a, ok := h.table(w, r)
		if !ok {
			return
		}
		f, ff, err := parseDeadFilter(r.PostForm)
		if err != nil {
			h.badInput(w, r, "Group: %v.", err)
			return
		}
		if ff.Class == "" || ff.Destination == "" {
			h.badInput(w, r, "Group: a destination and an error class are required: act on a group of the groups page.")
			return
		}
		reason := strings.TrimSpace(r.PostForm.Get("reason"))
		if action == "discard" {
			if reason == "" {
				h.badInput(w, r, "Discard: a reason is required; it is kept with the events.")
				return
			}
			if err := checkNote("reason", reason); err != nil {
				h.badInput(w, r, "Discard: %v.", err)
				return
			}
		}
		title := "Retry group"
		if action == "discard" {
			title = "Discard group"
		}
		run := func(ctx context.Context, opts ferryadmin.BulkOptions) (ferryadmin.BulkResult, error) {
			if action == "discard" {
				return ferryadmin.DiscardDead(ctx, a, opts, reason, operator(r))
			}
			return ferryadmin.RetryDead(ctx, a, opts)
		}
		if r.PostForm.Get("confirm") == "" {
			// First the count and a sample, changing nothing; the
			// action runs when the operator confirms it.
			ctx, cancel := h.ctx(r)
			defer cancel()
			res, err := run(ctx, ferryadmin.BulkOptions{Filter: f, DryRun: true})
			if err != nil {
				h.failed(w, r, "counting the group", err)
				return
			}
			h.page(w, r, "confirm", confirmPage{Kind: kind, Name: name, Action: action, Title: title, Group: ff,
				Matched: res.Matched, Sample: res.IDs[:min(len(res.IDs), confirmSample)], Reason: reason,
				DiedBy: res.At.UTC().Format(time.RFC3339Nano)})
			return
		}
		// The events of the group that were DEAD when the operator saw
		// the count, by the database clock: those that die since,
		// however old, are left for another look.
		previewed, err := strconv.ParseInt(r.PostForm.Get("max"), 10, 64)
		if err != nil || previewed < 1 {
			h.badInput(w, r, "Group: the confirmed count is missing: act from the group's confirmation page.")
			return
		}
		diedBy, err := time.Parse(time.RFC3339Nano, r.PostForm.Get("died_by"))
		if err != nil {
			h.badInput(w, r, "Group: the instant the group was counted is missing: act from the group's confirmation page.")
			return
		}
		if !h.spendToken(w, r) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.RunTimeout)
		defer cancel()
		f.DiedBy = diedBy
		res, err := run(ctx, ferryadmin.BulkOptions{Filter: f})
		h.logAction(r, action+" group", kind, name, 0, res, err, "filter", string(ff.Query()), "confirmed", previewed,
			"died_by", diedBy.Format(time.RFC3339Nano))
		if err != nil {
			h.failed(w, r, fmt.Sprintf("%s of the group (%d of %s changed before the error)", action, res.Changed,
				ferryadmin.Plural(res.Matched, "event")), err)
			return
		}
		p := newResult(kind, name, title, 0, res)
		p.Group = &ff
		p.Confirmed = previewed
		h.done(w, r, p)
	}
}

// confirmSample is how many of a group's events its confirmation page
// names.
const confirmSample = 20

// confirmPage asks to confirm an action on a group: how many events it
// matches now, and some of them.
type confirmPage struct {
	Kind, Name    string
	Action, Title string
	Group         filterForm
	Matched       int64
	Sample        []string
	Reason        string
	// DiedBy is the instant of the database clock the count was made
	// at (RFC 3339), which the confirmation binds the action to.
	DiedBy string
}

func (p confirmPage) title() string { return p.Title + " " + p.Kind + " " + p.Name + "?" }

// discardedPage lists DISCARDED events: who discarded them, why, when.
type discardedPage struct {
	Kind, Name string
	Filter     filterForm
	Filtered   bool
	Events     []ferryadmin.Event
	More       bool
	Limit      int
}

func (p discardedPage) title() string { return "DISCARDED " + p.Kind + " " + p.Name }

// discardedShown is the most DISCARDED events the page lists.
const discardedShown = 200

func (h *console) discarded(w http.ResponseWriter, r *http.Request) {
	kind, name, a, ok := h.table(w, r)
	if !ok {
		return
	}
	f, ff, err := parseDeadFilter(r.URL.Query())
	if err != nil {
		h.badInput(w, r, "Filter: %v.", err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	l, err := ferryadmin.ListDiscarded(ctx, a, f, discardedShown)
	if err != nil {
		h.failed(w, r, "listing DISCARDED events", err)
		return
	}
	h.page(w, r, "discarded", discardedPage{Kind: kind, Name: name, Filter: ff, Filtered: f.Selects(), Events: l.Events,
		More: l.More, Limit: discardedShown})
}

// restore takes the selected DISCARDED events back to DEAD.
func (h *console) restore(w http.ResponseWriter, r *http.Request) {
	kind, name, a, ok := h.table(w, r)
	if !ok {
		return
	}
	ids, err := selectedIDs(r)
	if err != nil {
		h.badInput(w, r, "Restore: %v.", err)
		return
	}
	if !h.spendToken(w, r) {
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	res, err := ferryadmin.RestoreDiscarded(ctx, a, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{IDs: ids}}, operator(r))
	h.logAction(r, "restore", kind, name, len(ids), res, err)
	if err != nil {
		h.failed(w, r, fmt.Sprintf("restore (%s changed before the error)", ferryadmin.Plural(res.Changed, "event")), err)
		return
	}
	h.done(w, r, newResult(kind, name, "Restore", len(ids), res))
}

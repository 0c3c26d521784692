package ferryconsole

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// inboxStore returns the inbox store the path's {db} names, or answers
// 404.
func (h *console) inboxStore(w http.ResponseWriter, r *http.Request) (string, ferrystore.InboxStore, bool) {
	db := r.PathValue("db")
	s, ok := h.cfg.Inboxes[db]
	if !ok {
		h.fail(w, r, http.StatusNotFound, "Not found", fmt.Sprintf("The console shows no consumer database named %q.", db))
	}
	return db, s, ok
}

// conflictsIndexPage lists the open conflicts of every consumer database.
type conflictsIndexPage struct {
	Inboxes []inboxSummary
}

func (conflictsIndexPage) title() string { return "Conflicts" }

func (h *console) conflictsIndex(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	var p conflictsIndexPage
	for _, n := range keys(h.cfg.Inboxes) {
		s := inboxSummary{Name: n, HasInbox: true}
		counts, err := h.cfg.Inboxes[n].OpenConflicts(ctx)
		if err != nil {
			s.Ref = h.logFailure(r, "count open conflicts of "+n, err)
		}
		s.Consumers = sortedCounts(counts)
		for _, c := range s.Consumers {
			s.Open += c.Count
		}
		p.Inboxes = append(p.Inboxes, s)
	}
	h.page(w, r, "conflicts", p)
}

// maxConsumerLen is the longest consumer name of the inbox tables.
const maxConsumerLen = 64

// conflictListPage lists the conflicts of one consumer database.
type conflictListPage struct {
	DB        string
	Consumer  string
	All       bool
	Conflicts []ferryadmin.Conflict
	More      bool
	Limit     int
}

func (p conflictListPage) title() string { return "Conflicts in " + p.DB }

const conflictListLimit = 200

func (h *console) conflictList(w http.ResponseWriter, r *http.Request) {
	db, s, ok := h.inboxStore(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	p := conflictListPage{DB: db, Consumer: strings.TrimSpace(q.Get("consumer")), Limit: conflictListLimit}
	if err := checkText("consumer", p.Consumer, maxConsumerLen); err != nil {
		h.badInput(w, r, "Filter: %v.", err)
		return
	}
	switch q.Get("all") {
	case "", "0":
	case "1":
		p.All = true
	default:
		h.badInput(w, r, "all %q: want 1 (resolved conflicts too) or nothing.", q.Get("all"))
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	l, err := ferryadmin.ListConflicts(ctx, s, ferryadmin.ConflictListOptions{Consumer: p.Consumer, All: p.All, Limit: p.Limit})
	if err != nil {
		h.failed(w, r, "listing conflicts", err)
		return
	}
	p.Conflicts, p.More = l.Conflicts, l.More
	h.page(w, r, "conflict_list", p)
}

// conflictID reads the path's conflict id, or answers 400.
func (h *console) conflictID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	v := r.PathValue("id")
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 1 {
		h.badInput(w, r, "Conflict id %q: want a positive number.", ferryadmin.OneLine(v, 40))
		return 0, false
	}
	return id, true
}

// conflictPage is one conflict, both versions side by side.
type conflictPage struct {
	DB        string
	Conflict  ferryadmin.Conflict
	Fields    []ferryadmin.FieldComparison
	Objects   bool
	Decisions []string
}

func (p conflictPage) title() string { return fmt.Sprintf("Conflict %d", p.Conflict.ID) }

func (h *console) conflictDetail(w http.ResponseWriter, r *http.Request) {
	db, s, ok := h.inboxStore(w, r)
	if !ok {
		return
	}
	id, ok := h.conflictID(w, r)
	if !ok {
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	found, err := ferryadmin.GetConflicts(ctx, s, []int64{id})
	if err != nil {
		h.failed(w, r, fmt.Sprintf("reading conflict %d", id), err)
		return
	}
	if len(found.Conflicts) == 0 {
		h.fail(w, r, http.StatusNotFound, "No such conflict", fmt.Sprintf("%s has no conflict %d.", db, id))
		return
	}
	p := conflictPage{DB: db, Conflict: found.Conflicts[0], Decisions: ferryadmin.Decisions}
	p.Fields, p.Objects = p.Conflict.CompareFields()
	h.page(w, r, "conflict", p)
}

// resolvedPage says what a resolution recorded.
type resolvedPage struct {
	DB     string
	ID     int64
	Result ferryadmin.ResolveResult
}

func (p resolvedPage) title() string { return fmt.Sprintf("Conflict %d", p.ID) }

func (h *console) resolve(w http.ResponseWriter, r *http.Request) {
	db, s, ok := h.inboxStore(w, r)
	if !ok {
		return
	}
	id, ok := h.conflictID(w, r)
	if !ok {
		return
	}
	decision := r.PostForm.Get("decision")
	note := strings.TrimSpace(r.PostForm.Get("note"))
	switch {
	case !slices.Contains(ferryadmin.Decisions, decision):
		h.badInput(w, r, "Decision %q: want one of %s.", ferryadmin.OneLine(decision, 40), strings.Join(ferryadmin.Decisions, ", "))
		return
	case note == "":
		h.badInput(w, r, "A note is required: it is kept with the decision (why, a ticket).")
		return
	}
	if err := checkNote("note", note); err != nil {
		h.badInput(w, r, "%v.", err)
		return
	}
	if !h.spendToken(w, r) {
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	res, err := ferryadmin.ResolveConflicts(ctx, s, []int64{id}, decision, note, operator(r))
	args := []any{"operator", operator(r), "action", "resolve", "inbox", db, "conflict", id, "decision", decision,
		"changed", len(res.Resolved)}
	if err != nil {
		h.cfg.Logger.Error("console action failed", append(args, "error", ferrytype.RedactURL(err.Error()))...)
		h.failed(w, r, fmt.Sprintf("resolving conflict %d", id), err)
		return
	}
	h.cfg.Logger.Info("console action", args...)
	h.page(w, r, "resolved", resolvedPage{DB: db, ID: id, Result: res})
}

// Windows of the inbox page's recent markers.
var activityWindows = []time.Duration{time.Hour, 24 * time.Hour}

// inboxPage is one consumer database: its consumers' markers and open
// conflicts, and its side-effect tasks.
type inboxPage struct {
	DB       string
	HasInbox bool
	Dialect  string
	// Consumers are those with recent markers or open conflicts.
	Consumers []consumerRow
	Windows   []string
	// Counted is true when the totals were asked for.
	Counted  bool
	AllTotal int64
	Tasks    *tasksSection
	Ref      string
}

func (p inboxPage) title() string { return "Inbox " + p.DB }

// consumerRow is one consumer's markers by window and outcome.
type consumerRow struct {
	Consumer string
	// Applied and Stale count the markers of each window of
	// activityWindows.
	Applied, Stale []int64
	Open           int64
	Total          int64
}

// tasksSection is the state of a consumer database's task table.
type tasksSection struct {
	Summary tableSummary
	Pending []ferryadmin.Event
	More    bool
}

const pendingTasksShown = 50

func (h *console) inbox(w http.ResponseWriter, r *http.Request) {
	db := r.PathValue("db")
	s, hasInbox := h.cfg.Inboxes[db]
	tasks, hasTasks := h.cfg.Tasks[db]
	if !hasInbox && !hasTasks {
		h.fail(w, r, http.StatusNotFound, "Not found", fmt.Sprintf("The console shows no consumer database named %q.", db))
		return
	}
	p := inboxPage{DB: db, HasInbox: hasInbox}
	for _, d := range activityWindows {
		p.Windows = append(p.Windows, strings.TrimSuffix(d.String(), "0m0s"))
	}
	switch r.URL.Query().Get("count") {
	case "", "0":
	case "1":
		p.Counted = true
	default:
		h.badInput(w, r, "count %q: want 1 (count every marker) or nothing.", r.URL.Query().Get("count"))
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	if hasInbox {
		p.Dialect = s.Dialect()
		rows := map[string]*consumerRow{}
		row := func(c string) *consumerRow {
			if rows[c] == nil {
				rows[c] = &consumerRow{Consumer: c, Applied: make([]int64, len(activityWindows)),
					Stale: make([]int64, len(activityWindows))}
			}
			return rows[c]
		}
		open, err := s.OpenConflicts(ctx)
		if err != nil {
			h.failed(w, r, "counting open conflicts", err)
			return
		}
		for c, n := range open {
			row(c).Open = n
		}
		for i, d := range activityWindows {
			counts, err := s.RecentMarkers(ctx, d)
			if err != nil {
				h.failed(w, r, "counting recent markers", err)
				return
			}
			for _, c := range counts {
				switch c.Outcome {
				case "stale":
					row(c.Consumer).Stale[i] += c.Markers
				default:
					row(c.Consumer).Applied[i] += c.Markers
				}
			}
		}
		if p.Counted {
			for c, x := range rows {
				if x.Total, err = s.MarkerCount(ctx, c); err != nil {
					h.failed(w, r, "counting markers", err)
					return
				}
			}
			if p.AllTotal, err = s.MarkerCount(ctx, ""); err != nil {
				h.failed(w, r, "counting markers", err)
				return
			}
		}
		for _, x := range rows {
			p.Consumers = append(p.Consumers, *x)
		}
		sort.Slice(p.Consumers, func(i, j int) bool { return p.Consumers[i].Consumer < p.Consumers[j].Consumer })
	}
	if hasTasks {
		t := &tasksSection{Summary: h.summarize(ctx, r, kindTasks, db, tasks)}
		if t.Summary.Ref == "" {
			rows, err := tasks.List(ctx, ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusNew, ferrytype.StatusSending},
				Limit: pendingTasksShown + 1})
			if err != nil {
				h.failed(w, r, "listing pending tasks", err)
				return
			}
			if t.More = len(rows) > pendingTasksShown; t.More {
				rows = rows[:pendingTasksShown]
			}
			for _, x := range rows {
				t.Pending = append(t.Pending, ferryadmin.EventOf(x, false))
			}
		}
		p.Tasks = t
	}
	h.page(w, r, "inbox", p)
}

package ferryconsole

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// table returns the outbox or task table the request's path names, or
// answers 404.
func (h *console) table(w http.ResponseWriter, r *http.Request) (kind, name string, a ferrystore.Admin, ok bool) {
	kind, name = r.PathValue("kind"), r.PathValue("name")
	tables, known := h.tables[kind]
	if known {
		a, ok = tables[name]
	}
	if !ok {
		what := "outbox"
		if kind == kindTasks {
			what = "task table"
		}
		h.fail(w, r, http.StatusNotFound, "Not found", fmt.Sprintf("The console shows no %s named %q.", what, name))
	}
	return kind, name, a, ok
}

// Longest values of the filters: those of the outbox columns.
const (
	maxIDLen          = 64
	maxTypeLen        = 64
	maxDestinationLen = 255
	maxAggregateLen   = 64 + 1 + 128
	maxWhenLen        = 40
)

// filterForm is the DEAD events filter as typed.
type filterForm struct {
	Type, Destination, Aggregate, Since, Until string
	// Error is text the last error contains; Class an error class
	// (ferryadmin.ErrorClass), as the groups show them.
	Error, Class string
}

// checkText validates a filter value: at most n bytes of UTF-8 without
// control characters.
func checkText(field, v string, n int) error {
	switch {
	case len(v) > n:
		return fmt.Errorf("%s is longer than %d bytes", field, n)
	case !utf8.ValidString(v):
		return fmt.Errorf("%s is not valid UTF-8", field)
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return fmt.Errorf("%s contains control characters", field)
	}
	return nil
}

// parseDeadFilter reads the filter of a DEAD events listing from q.
func parseDeadFilter(q url.Values) (ferryadmin.DeadFilter, filterForm, error) {
	ff := filterForm{Type: strings.TrimSpace(q.Get("type")), Destination: strings.TrimSpace(q.Get("destination")),
		Aggregate: strings.TrimSpace(q.Get("aggregate")), Since: strings.TrimSpace(q.Get("since")),
		Until: strings.TrimSpace(q.Get("until")), Error: q.Get("error"), Class: q.Get("class")}
	f := ferryadmin.DeadFilter{Type: ff.Type, Destination: ff.Destination, ErrorContains: ff.Error, ErrorClass: ff.Class}
	for _, c := range []struct {
		field, v string
		n        int
	}{{"type", ff.Type, maxTypeLen}, {"destination", ff.Destination, maxDestinationLen},
		{"aggregate", ff.Aggregate, maxAggregateLen}, {"since", ff.Since, maxWhenLen}, {"until", ff.Until, maxWhenLen},
		{"error text", ff.Error, ferrystore.MaxErrorContains}, {"error class", ff.Class, ferryadmin.MaxErrorClass}} {
		if err := checkText(c.field, c.v, c.n); err != nil {
			return f, ff, err
		}
	}
	if ff.Class != "" && ferryadmin.ErrorClass(ff.Class) != ff.Class {
		return f, ff, fmt.Errorf("error class %q is not an error class as the groups show them", ff.Class)
	}
	if ff.Aggregate != "" {
		typ, id, ok := strings.Cut(ff.Aggregate, ":")
		if !ok || id == "" {
			return f, ff, fmt.Errorf("aggregate %q: want type:id, e.g. order:42 (or :42 for events without a type)", ff.Aggregate)
		}
		f.AggregateType, f.AggregateID = typ, id
	}
	var err error
	if f.MaxAge, err = parseWhen("since", ff.Since); err != nil {
		return f, ff, err
	}
	if f.MinAge, err = parseWhen("until", ff.Until); err != nil {
		return f, ff, err
	}
	if f.MaxAge > 0 && f.MaxAge < f.MinAge {
		return f, ff, fmt.Errorf("since %s is after until %s", ff.Since, ff.Until)
	}
	return f, ff, nil
}

// parseWhen turns "2h" (ago) or an RFC 3339 time into an age.
func parseWhen(field, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return 0, fmt.Errorf("%s %q must be positive", field, v)
		}
		return d, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want a duration (2h) or an RFC 3339 time (2026-01-02T15:04:05Z)", field, v)
	}
	age := time.Since(t)
	if age <= 0 {
		return 0, fmt.Errorf("%s %s is in the future", field, v)
	}
	return age, nil
}

// Values are the filter's fields that are set, for hidden form fields.
func (ff filterForm) Values() map[string]string {
	out := map[string]string{}
	for k, v := range ff.query() {
		out[k] = v[0]
	}
	return out
}

// Query is the filter as a query string, "" when it filters nothing,
// encoded for links (url.Values.Encode, so safe to put after "?").
func (ff filterForm) Query() template.URL { return template.URL(ff.query().Encode()) }

// query encodes the filter for links.
func (ff filterForm) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"type": ff.Type, "destination": ff.Destination, "aggregate": ff.Aggregate,
		"since": ff.Since, "until": ff.Until, "error": ff.Error, "class": ff.Class} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// deadPage is a page of DEAD events.
type deadPage struct {
	Kind, Name string
	Filter     filterForm
	Filtered   bool
	Events     []ferryadmin.Event
	// Page is the page number from 1; First and Last the positions of its
	// events in the listing.
	Page, First, Last int
	// Prev and Next are the links to the neighbouring pages, "" for none.
	Prev, Next string
	// Deeper is true when more events match than the console pages
	// through (ferrystore.MaxListLimit): narrow the filter.
	Deeper bool
	// Dead counts every DEAD event of the table.
	Dead int64
}

func (p deadPage) title() string { return "DEAD " + p.Kind + " " + p.Name }

func (h *console) deadList(w http.ResponseWriter, r *http.Request) {
	kind, name, a, ok := h.table(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	f, ff, err := parseDeadFilter(q)
	if err != nil {
		h.badInput(w, r, "Filter: %v.", err)
		return
	}
	size := h.cfg.PageSize
	maxPage := maxListed / size
	page := 1
	if v := q.Get("page"); v != "" {
		page, err = strconv.Atoi(v)
		if err != nil || page < 1 || page > maxPage {
			h.badInput(w, r, "page %q: want a number from 1 to %d (the console lists the first %d matching events; "+
				"narrow the filter to see others).", v, maxPage, maxPage*size)
			return
		}
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	l, err := ferryadmin.ListDead(ctx, a, f, page*size)
	if err != nil {
		h.failed(w, r, "listing DEAD events", err)
		return
	}
	st, err := a.Stats(ctx)
	if err != nil {
		h.failed(w, r, "counting DEAD events", err)
		return
	}
	p := deadPage{Kind: kind, Name: name, Filter: ff, Filtered: f.Selects(), Page: page, Dead: st.Dead}
	from := (page - 1) * size
	if from < len(l.Events) {
		p.Events = l.Events[from:]
	}
	p.First, p.Last = from+1, from+len(p.Events)
	link := func(n int) string {
		v := ff.query()
		if n > 1 {
			v.Set("page", strconv.Itoa(n))
		}
		if len(v) == 0 {
			return "dead"
		}
		return "dead?" + v.Encode()
	}
	if page > 1 {
		p.Prev = link(page - 1)
	}
	if l.More {
		if page < maxPage {
			p.Next = link(page + 1)
		} else {
			p.Deeper = true
		}
	}
	h.page(w, r, "dead", p)
}

// checkID validates an event id: 1 to 64 bytes of UTF-8 without control
// characters.
func checkID(id string) error {
	if id == "" {
		return fmt.Errorf("an event id is required")
	}
	if err := checkText("event id", id, maxIDLen); err != nil {
		return fmt.Errorf("event id %q: %v", ferryadmin.OneLine(id, 80), err)
	}
	return nil
}

// eventPage is one event in full.
type eventPage struct {
	Kind, Name string
	Event      ferryadmin.EventDetail
	Headers    []header
	// HeldBack are the later NEW events of a DEAD event's aggregate, at
	// most maxHeldBack of them.
	HeldBack     []ferryadmin.Event
	HeldBackMore bool
}

func (p eventPage) title() string { return "Event " + p.Event.ID }

type header struct{ Name, Value string }

const maxHeldBack = 50

func (h *console) eventDetail(w http.ResponseWriter, r *http.Request) {
	kind, name, a, ok := h.table(w, r)
	if !ok {
		return
	}
	id := r.URL.Query().Get("id")
	if err := checkID(id); err != nil {
		h.badInput(w, r, "%v.", err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	found, err := ferryadmin.GetEvents(ctx, a, []string{id})
	if err != nil {
		h.failed(w, r, "reading event "+id, err)
		return
	}
	if len(found.Events) == 0 {
		h.fail(w, r, http.StatusNotFound, "No such event", fmt.Sprintf("%s %s has no event %q.", kind, name, id))
		return
	}
	p := eventPage{Kind: kind, Name: name, Event: found.Events[0]}
	for k, v := range p.Event.Headers {
		p.Headers = append(p.Headers, header{k, v})
	}
	sort.Slice(p.Headers, func(i, j int) bool { return p.Headers[i].Name < p.Headers[j].Name })
	e := p.Event
	if e.Status == ferrytype.StatusDead && e.AggregateID != "" {
		rows, err := a.List(ctx, ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusNew},
			AggregateType: e.AggregateType, AggregateID: e.AggregateID, Limit: ferrystore.MaxListLimit})
		if err != nil {
			h.failed(w, r, "reading the events held back by "+id, err)
			return
		}
		for _, x := range rows {
			if x.Sequence <= e.Sequence {
				continue
			}
			if len(p.HeldBack) == maxHeldBack {
				p.HeldBackMore = true
				break
			}
			p.HeldBack = append(p.HeldBack, ferryadmin.EventOf(x, false))
		}
	}
	h.page(w, r, "event", p)
}

// resultPage says what a retry, a discard or a restore changed.
type resultPage struct {
	Kind, Name string
	Action     string
	// Group is set for an action on a group (or any filter): the
	// selection, and Result's true totals.
	Group *filterForm
	// Asked counts the events selected in the form (0 for a group).
	Asked  int
	Result ferryadmin.BulkResult
	// NotMatching counts the selected events that were not of the status
	// any more when counted (retried, discarded or restored already, or
	// unknown).
	NotMatching int64
	// From is the status the action changes, Back the page to return to.
	From, Back string
	// Confirmed is the group's count the operator confirmed (a group
	// action acts on the events counted then, DEAD when the count was
	// shown).
	Confirmed int64
}

func (p resultPage) title() string { return p.Action + " " + p.Kind + " " + p.Name }

func newResult(kind, name, action string, asked int, res ferryadmin.BulkResult) resultPage {
	p := resultPage{Kind: kind, Name: name, Action: action, Asked: asked, Result: res, From: "DEAD", Back: "dead"}
	if res.Action == "restore" {
		p.From, p.Back = "DISCARDED", "discarded"
	}
	if asked > 0 {
		p.NotMatching = max(int64(asked)-res.Matched, 0)
	}
	return p
}

// selectedIDs reads the ids of a retry or discard form.
func selectedIDs(r *http.Request) ([]string, error) {
	var ids []string
	seen := map[string]bool{}
	for _, id := range r.PostForm["id"] {
		id = strings.TrimSpace(id)
		if err := checkID(id); err != nil {
			return nil, err
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	switch {
	case len(ids) == 0:
		return nil, fmt.Errorf("no event selected: tick the events to act on")
	case len(ids) > ferrystore.MaxListLimit:
		return nil, fmt.Errorf("%d events selected, at most %d at once", len(ids), ferrystore.MaxListLimit)
	}
	return ids, nil
}

func (h *console) retry(w http.ResponseWriter, r *http.Request) {
	kind, name, a, ok := h.table(w, r)
	if !ok {
		return
	}
	ids, err := selectedIDs(r)
	if err != nil {
		h.badInput(w, r, "Retry: %v.", err)
		return
	}
	if !h.spendToken(w, r) {
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	res, err := ferryadmin.RetryDead(ctx, a, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{IDs: ids}})
	h.logAction(r, "retry", kind, name, len(ids), res, err)
	if err != nil {
		h.failed(w, r, fmt.Sprintf("retry (%s changed before the error)", ferryadmin.Plural(res.Changed, "event")), err)
		return
	}
	h.done(w, r, newResult(kind, name, "Retry", len(ids), res))
}

// maxReasonLen bounds a discard reason or a resolution note.
const maxReasonLen = 2000

func (h *console) discard(w http.ResponseWriter, r *http.Request) {
	kind, name, a, ok := h.table(w, r)
	if !ok {
		return
	}
	ids, err := selectedIDs(r)
	if err != nil {
		h.badInput(w, r, "Discard: %v.", err)
		return
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if reason == "" {
		h.badInput(w, r, "Discard: a reason is required; it is kept with the events.")
		return
	}
	if err := checkNote("reason", reason); err != nil {
		h.badInput(w, r, "Discard: %v.", err)
		return
	}
	if !h.spendToken(w, r) {
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	res, err := ferryadmin.DiscardDead(ctx, a, ferryadmin.BulkOptions{Filter: ferryadmin.DeadFilter{IDs: ids}}, reason, operator(r))
	h.logAction(r, "discard", kind, name, len(ids), res, err)
	if err != nil {
		h.failed(w, r, fmt.Sprintf("discard (%s changed before the error)", ferryadmin.Plural(res.Changed, "event")), err)
		return
	}
	h.done(w, r, newResult(kind, name, "Discard", len(ids), res))
}

// checkNote validates a free text kept with a decision.
func checkNote(field, v string) error {
	switch {
	case len(v) > maxReasonLen:
		return fmt.Errorf("the %s is longer than %d bytes", field, maxReasonLen)
	case !utf8.ValidString(v):
		return fmt.Errorf("the %s is not valid UTF-8", field)
	case strings.IndexFunc(v, func(c rune) bool { return unicode.IsControl(c) && c != '\n' && c != '\r' && c != '\t' }) >= 0:
		return fmt.Errorf("the %s contains control characters", field)
	}
	return nil
}

// logAction logs what an operator changed.
func (h *console) logAction(r *http.Request, action, kind, name string, asked int, res ferryadmin.BulkResult, err error,
	more ...any) {
	args := append([]any{"operator", operator(r), "action", action, "table_kind", kind, "table", name, "selected", asked,
		"matched", res.Matched, "changed", res.Changed, "skipped", res.Skipped}, more...)
	if err != nil {
		h.cfg.Logger.Error("console action failed", append(args, "error", ferrytype.RedactURL(err.Error()))...)
		return
	}
	h.cfg.Logger.Info("console action", args...)
}

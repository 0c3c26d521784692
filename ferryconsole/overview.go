package ferryconsole

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// overviewPage is the console's front page.
type overviewPage struct {
	Outboxes []tableSummary
	Tasks    []tableSummary
	Inboxes  []inboxSummary
}

func (overviewPage) title() string { return "Overview" }

// tableSummary is the state of one outbox or task table.
type tableSummary struct {
	Kind, Name string
	Report     ferryadmin.StatusReport
	// Destinations joins the pending and the DEAD events by destination.
	Destinations []destinationRow
	// DeadNote, when set, says that the DEAD column is not the exact
	// count and what it is instead.
	DeadNote string
	// PendingNote, when set, says that the oldest pending event and the
	// pending columns are those of the events next in line only: more
	// events are pending than ferrystore.PendingWindow.
	PendingNote string
	// SentLastMinute sums what the relays alive marked SENT in about the
	// last minute, from their heartbeats.
	SentLastMinute int64
	// Ref names the failure in the log when the table could not be read.
	Ref string
}

// destinationRow is one destination's pending and DEAD events.
type destinationRow struct {
	Destination          string
	New, Sending, Dead   int64
	OldestPendingSeconds float64
}

// inboxSummary is the open conflicts of one consumer database.
type inboxSummary struct {
	Name      string
	HasInbox  bool
	Open      int64
	Consumers []consumerCount
	Ref       string
}

type consumerCount struct {
	Consumer string
	Count    int64
}

// maxListed is the most events a listing of ferryadmin returns.
const maxListed = ferrystore.MaxListLimit - 1

func (h *console) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	var p overviewPage
	for _, n := range keys(h.cfg.Outboxes) {
		p.Outboxes = append(p.Outboxes, h.summarize(ctx, r, kindOutbox, n, h.cfg.Outboxes[n]))
	}
	for _, n := range keys(h.cfg.Tasks) {
		p.Tasks = append(p.Tasks, h.summarize(ctx, r, kindTasks, n, h.cfg.Tasks[n]))
	}
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
	if ctx.Err() != nil && r.Context().Err() == nil {
		h.failed(w, r, "the overview", ctx.Err())
		return
	}
	h.page(w, r, "overview", p)
}

// summarize reads the status of one table; a failure is logged and shown
// in the table's section, not as the page's.
func (h *console) summarize(ctx context.Context, r *http.Request, kind, name string, a ferrystore.Admin) tableSummary {
	s := tableSummary{Kind: kind, Name: name}
	// The DEAD events by destination are counted beside the status, on
	// another connection: each reads a million DEAD events' index entries
	// in about a second.
	type deadCounts struct {
		counts []ferrystore.DestinationCount
		err    error
	}
	dead := make(chan deadCounts, 1)
	go func() {
		c, err := a.DeadByDestination(ctx, ferrystore.MaxListLimit)
		dead <- deadCounts{c, err}
	}()
	rep, err := ferryadmin.Status(ctx, a, &ferryadmin.StatusOptions{Destinations: 50, Errors: 0, MaxPendingAge: h.cfg.MaxPendingAge,
		RelayStaleAfter: h.cfg.RelayStaleAfter})
	if err != nil {
		<-dead
		s.Ref = h.logFailure(r, "status of "+kind+" "+name, err)
		return s
	}
	s.Report = rep
	if rep.PendingWindowed {
		s.PendingNote = fmt.Sprintf("Behind %s pending and %s in flight, the oldest pending event and the pending, in-flight "+
			"and oldest columns by destination are among the %s next in line of each (in the order the relays send them): "+
			"an event further back may have waited longer. The totals above are exact.",
			thousands(rep.Stats.New), thousands(rep.Stats.Sending), thousands(int64(rep.PendingWindow)))
	}
	for _, x := range rep.Relays {
		if x.Alive {
			s.SentLastMinute += x.SentLastMinute
		}
	}
	rows := map[string]*destinationRow{}
	row := func(d string) *destinationRow {
		if rows[d] == nil {
			rows[d] = &destinationRow{Destination: d}
		}
		return rows[d]
	}
	for _, d := range rep.Destinations {
		x := row(d.Destination)
		x.New, x.Sending, x.OldestPendingSeconds = d.New, d.Sending, d.OldestPending.Seconds()
	}
	// Counted by the database: exact at any number.
	d := <-dead
	if d.err != nil {
		s.Ref = h.logFailure(r, "DEAD events by destination of "+kind+" "+name, d.err)
		s.DeadNote = "DEAD by destination could not be counted (see the reference above)."
	}
	for _, c := range d.counts {
		row(c.Destination).Dead = c.Count
	}
	if len(d.counts) == ferrystore.MaxListLimit {
		s.DeadNote = fmt.Sprintf("DEAD by destination shows the %d destinations with the most DEAD events only.", len(d.counts))
	}
	for _, x := range rows {
		s.Destinations = append(s.Destinations, *x)
	}
	sort.Slice(s.Destinations, func(i, j int) bool {
		a, b := s.Destinations[i], s.Destinations[j]
		if a.OldestPendingSeconds != b.OldestPendingSeconds {
			return a.OldestPendingSeconds > b.OldestPendingSeconds
		}
		if a.Dead != b.Dead {
			return a.Dead > b.Dead
		}
		return a.Destination < b.Destination
	})
	return s
}

// thousands writes n with a comma between each group of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// logFailure logs an error of a section of a page and returns its
// reference.
func (h *console) logFailure(r *http.Request, what string, err error) string {
	ref := newRef()
	h.cfg.Logger.Error("console read failed", "ref", ref, "what", what, "operator", operator(r),
		"error", ferrytype.RedactURL(err.Error()))
	return ref
}

func sortedCounts(m map[string]int64) []consumerCount {
	out := make([]consumerCount, 0, len(m))
	for k, v := range m {
		out = append(out, consumerCount{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Consumer < out[j].Consumer })
	return out
}

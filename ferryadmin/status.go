package ferryadmin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// Defaults of StatusOptions.
const (
	DefaultStatusDestinations = 20
	DefaultStatusErrors       = 5
	DefaultMaxPendingAge      = 5 * time.Minute
)

// StatusOptions says what Status reports. Nil means the defaults.
type StatusOptions struct {
	// Destinations is the most pending destinations reported, oldest
	// first, 0 to ferrystore.MaxListLimit; 0 reports none. Default (nil
	// options) DefaultStatusDestinations.
	Destinations int
	// Errors is the most failed events reported, oldest first, 0 to
	// ferrystore.MaxListLimit; 0 reports none. Default (nil options)
	// DefaultStatusErrors.
	Errors int
	// CountSent counts SENT events too. Counting them reads every retained
	// SENT row's index entry, so its cost grows with retention. Default
	// false.
	CountSent bool
	// MaxPendingAge is the age of the oldest pending event that needs
	// attention. Default (zero) DefaultMaxPendingAge.
	MaxPendingAge time.Duration
	// RelayStaleAfter is how long after its last beat a relay still counts
	// as alive (see Relays). Default (zero) DefaultRelayStaleAfter.
	RelayStaleAfter time.Duration
	// RelayForgetAfter is how long after its last beat a relay is left
	// out of StatusReport.Relays (and counted in RelaysForgotten): the
	// time after which the relay leading the table's maintenance deletes
	// its row (ferry.HeartbeatConfig.ForgetAfter), which no relay does
	// while none runs. Default (zero) ferry.DefaultForgetAfter (24h);
	// at least RelayStaleAfter.
	RelayForgetAfter time.Duration
}

// StatusReport describes an outbox table: what ferry status prints. Its
// JSON form is stable.
type StatusReport struct {
	Table   string `json:"table"`
	Dialect string `json:"dialect"`
	// Counts holds the events by status: NEW, SENDING, DEAD, DISCARDED,
	// and SENT when counted.
	Counts map[string]int64 `json:"counts"`
	// Ready is how many NEW events are available now.
	Ready int64 `json:"ready"`
	// OldestPendingSeconds is how long the NEW or SENDING event pending
	// for the longest has been, among the events next in line (see
	// PendingWindow): since it was created, or since a person last retried
	// it out of DEAD. Exact when PendingWindowed is false; otherwise a
	// lower bound, never below how long the event next in line has waited
	// since it became available (ferrystore.Stats.OldestPending).
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	// OldestPending is that event, nil when none.
	OldestPending *Event `json:"oldest_pending_event,omitempty"`
	// Destinations are the pending events by destination and Attempts by
	// attempts, among the events next in line (see PendingWindow).
	Destinations []ferrystore.DestinationStats `json:"destinations"`
	Attempts     []ferrystore.AttemptCount     `json:"attempts"`
	// PendingWindow is how many NEW events, and how many SENDING ones, the
	// figures of the pending events that read rows were computed over:
	// the oldest pending event, Destinations, Attempts and the pending
	// events among Failed come from the ferrystore.PendingWindow events of
	// each status next in line (in the order relays claim them), so that
	// the report costs the same behind any backlog. The counts (Counts,
	// Ready) are exact.
	PendingWindow int `json:"pending_window"`
	// PendingWindowed reports that more events were NEW, or SENDING, than
	// PendingWindow: those figures then describe the events next in line
	// only, and OldestPendingSeconds is a lower bound. False: they are
	// exact.
	PendingWindowed bool `json:"pending_windowed"`
	// Failed are the oldest events that failed: the DEAD ones, and the
	// pending ones next in line (see PendingWindow) that recorded an error.
	Failed []Event `json:"failed"`
	// Relays are the relays of the table from their heartbeat rows, alive
	// ones first (see Relays); empty when none recorded itself or when
	// they could not be read.
	Relays []RelayInfo `json:"relays"`
	// RelaysError says why Relays could not be read (a table migrated
	// before 0003_relay); empty when they were.
	RelaysError string `json:"relays_error,omitempty"`
	// RelaysForgotten counts the relays left out of Relays: their last
	// beat is older than StatusOptions.RelayForgetAfter, and their rows
	// wait for a relay to delete them.
	RelaysForgotten int `json:"relays_forgotten,omitempty"`
	// RelayForgetAfter is the age past which relays were left out.
	RelayForgetAfter time.Duration `json:"-"`
	// Log is the log relay's reader of the table (ferry relay --source
	// log) from its lease; nil when no relay ever read the table's log.
	Log *LogInfo `json:"log,omitempty"`
	// Attention says, in sentences, what needs a person; empty when
	// nothing does.
	Attention []string `json:"attention"`

	// Stats are the store's counts the report was built from.
	Stats ferrystore.Stats `json:"-"`
	// SentCounted reports whether Counts holds SENT.
	SentCounted bool `json:"-"`
	// Unhealthy is true when there are DEAD events or the oldest pending
	// event is older than MaxPendingAge: what a probe alerts on. Behind a
	// backlog larger than PendingWindow, the oldest pending event is the
	// oldest of those next in line (OldestPendingSeconds).
	Unhealthy bool `json:"-"`
	// MaxPendingAge is the limit Unhealthy was judged by.
	MaxPendingAge time.Duration `json:"-"`
}

func (o *StatusOptions) withDefaults() StatusOptions {
	if o == nil {
		return StatusOptions{Destinations: DefaultStatusDestinations, Errors: DefaultStatusErrors,
			MaxPendingAge: DefaultMaxPendingAge, RelayStaleAfter: DefaultRelayStaleAfter, RelayForgetAfter: ferry.DefaultForgetAfter}
	}
	c := *o
	if c.MaxPendingAge == 0 {
		c.MaxPendingAge = DefaultMaxPendingAge
	}
	if c.RelayStaleAfter == 0 {
		c.RelayStaleAfter = DefaultRelayStaleAfter
	}
	if c.RelayForgetAfter == 0 {
		c.RelayForgetAfter = max(ferry.DefaultForgetAfter, c.RelayStaleAfter)
	}
	return c
}

func (o StatusOptions) validate() error {
	switch {
	case o.Destinations < 0 || o.Destinations > ferrystore.MaxListLimit:
		return invalid("StatusOptions.Destinations %d must be within 0..%d", o.Destinations, ferrystore.MaxListLimit)
	case o.Errors < 0 || o.Errors > ferrystore.MaxListLimit:
		return invalid("StatusOptions.Errors %d must be within 0..%d", o.Errors, ferrystore.MaxListLimit)
	case o.MaxPendingAge < 0:
		return invalid("StatusOptions.MaxPendingAge must be positive")
	case o.RelayStaleAfter < 0:
		return invalid("StatusOptions.RelayStaleAfter must be positive")
	case o.RelayForgetAfter < o.RelayStaleAfter:
		return invalid("StatusOptions.RelayForgetAfter %s is shorter than RelayStaleAfter %s", o.RelayForgetAfter,
			o.RelayStaleAfter)
	}
	return nil
}

// Status reports the state of the outbox table of a: counts by status, the
// oldest pending event, the pending events per destination, the attempts
// of unsent events, the oldest errors, the relays and whether they are
// alive (from their heartbeats), and what needs attention. It only reads,
// and every number comes from the database, so it works while every relay
// is down.
//
// Its cost does not grow with the backlog: the counts read the pending
// index alone, and what needs the rows of pending events (the oldest one,
// per destination, attempts, the pending events that failed) is computed
// over the ferrystore.PendingWindow events of each status next in line
// (StatusReport.PendingWindowed says when that is not all of them): the
// pending events that failed are read with Admin.PendingFailures.
func Status(ctx context.Context, a ferrystore.Admin, opts *StatusOptions) (StatusReport, error) {
	if err := needStore("Status", a); err != nil {
		return StatusReport{}, err
	}
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return StatusReport{}, err
	}
	st, err := a.Stats(ctx)
	if err != nil {
		return StatusReport{}, err
	}
	count := []ferrytype.Status{ferrytype.StatusDiscarded}
	if o.CountSent {
		count = append(count, ferrytype.StatusSent)
	}
	counts, err := a.CountByStatus(ctx, count...)
	if err != nil {
		return StatusReport{}, err
	}
	rep := StatusReport{Table: a.Table(), Dialect: a.Dialect(), Ready: st.Ready,
		OldestPendingSeconds: st.OldestPending.Seconds(), PendingWindow: ferrystore.PendingWindow, PendingWindowed: st.Windowed,
		Counts: map[string]int64{"NEW": st.New, "SENDING": st.Sending, "DEAD": st.Dead,
			"DISCARDED": counts[ferrytype.StatusDiscarded]},
		Destinations: []ferrystore.DestinationStats{}, Failed: []Event{}, Attention: []string{}, Relays: []RelayInfo{},
		Stats: st, SentCounted: o.CountSent, MaxPendingAge: o.MaxPendingAge, RelayForgetAfter: o.RelayForgetAfter}
	if o.CountSent {
		rep.Counts["SENT"] = counts[ferrytype.StatusSent]
	}
	if st.OldestPendingID != "" {
		r, err := a.Get(ctx, st.OldestPendingID)
		switch {
		case err == nil:
			e := EventOf(r, false)
			rep.OldestPending = &e
		case !errors.Is(err, ferrytype.ErrNotFound): // else sent and purged since
			return StatusReport{}, err
		}
	}
	if o.Destinations > 0 {
		dests, err := a.PendingByDestination(ctx, o.Destinations)
		if err != nil {
			return StatusReport{}, err
		}
		rep.Destinations = append(rep.Destinations, dests...)
	}
	attempts, err := a.Attempts(ctx)
	if err != nil {
		return StatusReport{}, err
	}
	rep.Attempts = append([]ferrystore.AttemptCount{}, attempts...)
	if o.Errors > 0 {
		rows, err := failedEvents(ctx, a, o.Errors)
		if err != nil {
			return StatusReport{}, err
		}
		rep.Failed = append(rep.Failed, eventsOf(rows, false)...)
	}
	relays, err := Relays(ctx, a, o.RelayStaleAfter)
	switch {
	case err == nil:
		for _, r := range relays {
			if r.Age >= o.RelayForgetAfter {
				rep.RelaysForgotten++
				continue
			}
			rep.Relays = append(rep.Relays, r)
		}
	case errors.Is(err, ferrytype.ErrUndefinedTable):
		rep.RelaysError = err.Error()
	default:
		return StatusReport{}, err
	}
	switch ls, found, lerr := a.LeaseState(ctx, ferrystore.LeaseLog); {
	case lerr == nil && found:
		rep.Log = logInfo(ls)
		rep.Log.Standbys = logRoles(rep.Relays, rep.Log.Owner)
	case lerr != nil && !errors.Is(lerr, ferrytype.ErrUndefinedTable):
		return StatusReport{}, lerr
	}
	rep.Attention = attention(st, rep.OldestPending, o.MaxPendingAge)
	if rep.Log != nil && rep.Log.Owner == "" && st.New+st.Sending > 0 {
		rep.Attention = append(rep.Attention, fmt.Sprintf("no relay reads the table's log (%s): its checkpoint was "+
			"saved %s ago; start ferry relay --source log, or polling relays, or the log retains what it holds for it",
			rep.Log.Source, FormatAge(rep.Log.SavedAge)))
	}
	if rep.RelaysError == "" {
		if a := relaysAttention(st, rep.Relays, rep.RelaysForgotten, o); a != "" {
			rep.Attention = append(rep.Attention, a)
		}
	} else if errors.Is(err, ferrytype.ErrUndefinedTable) {
		rep.Attention = append(rep.Attention, fmt.Sprintf("the relays' heartbeat table %s_relay is missing, "+
			"so which relays are alive is unknown: run ferry migrate", rep.Table))
	}
	rep.Unhealthy = st.Dead > 0 || st.OldestPending > o.MaxPendingAge
	return rep, nil
}

// failedEvents returns up to limit events that failed, the oldest first
// (created_at, then event id): the pending ones next in line that
// recorded an error, and the DEAD ones through their own index, so that a
// million pending or DEAD events cost a page, not a sort of them all.
func failedEvents(ctx context.Context, a ferrystore.Admin, limit int) ([]ferrystore.Row, error) {
	var rows []ferrystore.Row
	sel := selection{parts: []part{{f: ferrystore.Filter{Failed: true, Statuses: []ferrytype.Status{ferrytype.StatusDead}}}}}
	pending, err := a.PendingFailures(ctx, limit)
	if err != nil {
		return nil, err
	}
	rows = append(rows, pending...)
	more, _, err := first(ctx, a, sel, limit, readAll)
	if err != nil {
		return nil, err
	}
	rows = append(rows, more...)
	sort.SliceStable(rows, func(i, j int) bool {
		x, y := &rows[i], &rows[j]
		if !x.CreatedAt.Equal(y.CreatedAt) {
			return x.CreatedAt.Before(y.CreatedAt)
		}
		return x.ID < y.ID
	})
	return rows[:min(len(rows), limit)], nil
}

// relaysAttention says "no relay alive" when events wait and no relay beat
// within o.RelayStaleAfter.
func relaysAttention(st ferrystore.Stats, relays []RelayInfo, forgotten int, o StatusOptions) string {
	pending := st.New + st.Sending
	if pending == 0 || aliveRelays(relays) > 0 {
		return ""
	}
	msg := fmt.Sprintf("no relay alive: %s pending and no relay of this table beat in the last %s", Plural(pending, "event"),
		FormatAge(o.RelayStaleAfter))
	switch {
	case len(relays) == 0 && forgotten > 0:
		return msg + fmt.Sprintf(" (%s recorded, the last more than %s ago: start ferry relay)",
			Plural(forgotten, "relay"), FormatAge(o.RelayForgetAfter))
	case len(relays) == 0:
		return msg + " (none is recorded: start ferry relay; relays older than this ferry do not record themselves)"
	}
	last := relays[0]
	for _, r := range relays[1:] {
		if r.Age < last.Age {
			last = r
		}
	}
	return msg + fmt.Sprintf(" (the last one, %s on %s, beat %s ago: killed, hung, or cut off from the database?)",
		last.ID, last.Host, FormatAge(last.Age))
}

// attention says, in words, what needs a person.
func attention(st ferrystore.Stats, oldest *Event, maxAge time.Duration) []string {
	out := []string{}
	if st.Dead > 0 {
		wait := "waits"
		if st.Dead > 1 {
			wait = "wait"
		}
		out = append(out, fmt.Sprintf("%s %s for a decision (ferry dead list; then retry or discard). "+
			"With --ordered relays each holds back the later events of its aggregate.", Plural(st.Dead, "DEAD event"), wait))
	}
	if oldest == nil {
		return out
	}
	// A retried event keeps its last error until its next attempt: only an
	// attempt since says that publishing fails.
	age, tried := FormatAge(st.OldestPending)+" old", oldest.Attempts > 0
	if oldest.RevivedAt != nil {
		age = "pending " + FormatAge(st.OldestPending) + " since a person retried it out of DEAD"
	}
	// Behind a backlog larger than the window, the oldest is the oldest of
	// the events next in line: an event further back may be older.
	which := "the oldest pending event"
	if st.Windowed {
		which = fmt.Sprintf("the oldest pending event of the %d next in line", ferrystore.PendingWindow)
	}
	if st.OldestPending <= maxAge && tried && oldest.LastError != "" {
		out = append(out, fmt.Sprintf("publishing fails: %s (%s, %s) failed %s; its last error: %s",
			which, oldest.ID, age, Plural(oldest.Attempts, "attempt"), OneLine(oldest.LastError, 300)))
	}
	if st.OldestPending > maxAge {
		switch {
		case !tried && oldest.AvailableAt.Before(time.Now().Add(-maxAge)):
			out = append(out, fmt.Sprintf("%s (%s) is %s and was not attempted since: "+
				"is a relay running on this table, or is an ordered aggregate held back by a DEAD event?", which, oldest.ID, age))
		case tried && oldest.LastError != "":
			out = append(out, fmt.Sprintf("%s (%s) is %s after %s; its last error: %s",
				which, oldest.ID, age, Plural(oldest.Attempts, "attempt"), OneLine(oldest.LastError, 300)))
		default:
			out = append(out, fmt.Sprintf("%s (%s) is %s (more than %s)", which, oldest.ID, age, maxAge))
		}
	}
	return out
}

// LogInfo is the log relay's reader of a table, from its lease
// (ferrystore.LeaseLog in <table>_lease). Its JSON form is stable: the
// lease's fields, then lease_left_seconds, saved_age_seconds, lag_bytes,
// head and standbys.
type LogInfo struct {
	// LeaseState is the lease: Source names the log ("binlog host:port",
	// "pgoutput slot ..."), Position is the checkpoint (the log is handled
	// up to it), Owner the relay that holds the lease (RelayConfig.ID),
	// empty when none does: the lease ended, or was given up at a stop.
	ferrystore.LeaseState
	// LeaseLeftSeconds is LeaseLeft, how long the owner's lease has
	// left by the database clock, in seconds.
	LeaseLeftSeconds float64 `json:"lease_left_seconds"`
	// SavedAge is how long ago the checkpoint was last saved.
	SavedAge        time.Duration `json:"-"`
	SavedAgeSeconds float64       `json:"saved_age_seconds"`
	// LagBytes is the log the database retains for the reader, when the
	// caller measured it (ferry status does, through the feed); -1 when
	// unknown.
	LagBytes int64 `json:"lag_bytes"`
	// Head is the log's end when LagBytes was measured.
	Head ferrystore.LogPosition `json:"head,omitempty"`
	// Standbys are the relays alive that would read the log but do not
	// hold the lease (ferry relay --source log beside the reader): one of
	// them takes over when the reader's lease ends.
	Standbys []string `json:"standbys"`
}

// logRoles sets the log role of the relay that reads the log, owner (empty
// when none holds the lease), and of each relay alive that stands by for
// it, and returns the standbys.
func logRoles(relays []RelayInfo, owner string) []string {
	standbys := []string{}
	for i := range relays {
		r := &relays[i]
		switch {
		case r.ID == owner && owner != "":
			r.LogRole = LogRoleReader
		case r.Source == ferrystore.RelaySourceLog && r.Alive:
			r.LogRole = LogRoleStandby
			standbys = append(standbys, r.ID)
		}
	}
	return standbys
}

func logInfo(ls ferrystore.LeaseState) *LogInfo {
	li := &LogInfo{LeaseState: ls, LagBytes: -1, LeaseLeftSeconds: ls.LeaseLeft.Seconds()}
	if ls.LeaseLeft <= 0 {
		li.Owner = "" // the lease ended: a standby may take it
	}
	li.SavedAge = time.Since(ls.SavedAt)
	li.SavedAgeSeconds = li.SavedAge.Seconds()
	return li
}

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
)

type statusFlags struct {
	json          bool
	destinations  int
	errors        int
	countSent     bool
	check         bool
	maxPendingAge time.Duration
	staleAfter    time.Duration
	forgetAfter   time.Duration
}

func newStatus(g *globals) *cobra.Command {
	f := &statusFlags{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the outbox table: counts by status, oldest pending event, destinations, attempts, errors",
		Long: `Shows what an on-call engineer asks first: how many events wait (NEW, and how
many of them are ready now), how many are being sent, DEAD or DISCARDED; how old
the oldest pending event is, and what happened to it; the pending events per
destination; how many attempts the unsent events took; the errors of the
oldest events that failed; and the relays of the table, from the heartbeat
each writes every few seconds (host, pid, version, events in flight, the
broker and whether it is connected), alive when their last beat is younger
than --relay-stale-after. A relay not alive shows NO, its broker "unknown":
it was killed, hangs, lost the database, or (a relay in your own program)
its process ended without Stop. Its row stays until the relay leading the
table's maintenance deletes it, 24h after its last beat; relays silent for
longer than --relay-forget-after are not listed, only counted. Then it says
what needs attention, "no relay alive" among it when events wait and no
relay beat recently.

All numbers come from the database, so status works while every relay is down.
Counting SENT events reads every retained SENT row's index entry, so it is
off unless --count-sent.

The counts are exact at any number of events: they read the pending index
alone. What needs the events' rows (the oldest pending event, pending by
destination, attempts, the pending events that failed) is computed over the
10,000 NEW and 10,000 SENDING events next in line, in the order the relays
send them, so that status answers in the same time behind a backlog of
millions. Behind a larger backlog the output says so, and the oldest pending
event is the oldest of those next in line: an event further back (delayed, or
waiting for its next attempt) may have waited longer. In --json,
pending_window is that number and pending_windowed says whether the backlog
was larger.

With --check, the exit code is 4 when there are DEAD events or the oldest
pending event is older than --max-pending-age: usable as a cron or probe check.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runStatus(cmd, g, f) },
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.json, "json", false, "print JSON")
	fl.IntVar(&f.destinations, "destinations", 20, "pending destinations to show, oldest first (0: none)")
	fl.IntVar(&f.errors, "errors", 5, "failed events to show, oldest first (0: none)")
	fl.BoolVar(&f.countSent, "count-sent", false, "count SENT events too (cost grows with retention)")
	fl.BoolVar(&f.check, "check", false, "exit 4 if there are DEAD events or the oldest pending event is older than --max-pending-age")
	fl.DurationVar(&f.maxPendingAge, "max-pending-age", 5*time.Minute, "age of the oldest pending event that needs attention")
	bindEnv(fl, "max-pending-age", "FERRY_MAX_PENDING_AGE")
	fl.DurationVar(&f.staleAfter, "relay-stale-after", ferryadmin.DefaultRelayStaleAfter,
		"a relay whose last heartbeat is older than this is not alive (at least 3 of the relays' heartbeat intervals)")
	bindEnv(fl, "relay-stale-after", "FERRY_RELAY_STALE_AFTER")
	fl.DurationVar(&f.forgetAfter, "relay-forget-after", ferry.DefaultForgetAfter,
		"a relay whose last heartbeat is older than this is not listed, only counted (the relays delete its row then)")
	return cmd
}

func runStatus(cmd *cobra.Command, g *globals, f *statusFlags) error {
	ctx := cmd.Context()
	switch {
	case f.destinations < 0 || f.destinations > ferrystore.MaxListLimit:
		return usageError{fmt.Errorf("--destinations must be within 0..%d", ferrystore.MaxListLimit)}
	case f.errors < 0 || f.errors > ferrystore.MaxListLimit:
		return usageError{fmt.Errorf("--errors must be within 0..%d", ferrystore.MaxListLimit)}
	case f.maxPendingAge <= 0:
		return usageError{fmt.Errorf("--max-pending-age must be positive")}
	case f.staleAfter <= 0:
		return usageError{fmt.Errorf("--relay-stale-after must be positive")}
	case f.forgetAfter < f.staleAfter:
		return usageError{fmt.Errorf("--relay-forget-after %s is shorter than --relay-stale-after %s", f.forgetAfter, f.staleAfter)}
	}
	a, err := openAdmin(ctx, g)
	if err != nil {
		return err
	}
	defer a.Close()
	rep, err := ferryadmin.Status(ctx, a, &ferryadmin.StatusOptions{Destinations: f.destinations, Errors: f.errors,
		CountSent: f.countSent, MaxPendingAge: f.maxPendingAge, RelayStaleAfter: f.staleAfter, RelayForgetAfter: f.forgetAfter})
	if err != nil {
		return err
	}
	if rep.Log != nil {
		measureLogLag(ctx, g, rep.Log)
	}
	out := cmd.OutOrStdout()
	if f.json {
		if err := writeJSON(out, rep); err != nil {
			return err
		}
	} else {
		printStatus(out, &rep)
	}
	if f.check && rep.Unhealthy {
		return exitError{exitFindings, fmt.Errorf("status check: %d DEAD, oldest pending %s (limit %s)",
			rep.Stats.Dead, ferryadmin.FormatAge(rep.Stats.OldestPending), f.maxPendingAge)}
	}
	return nil
}

func printStatus(w io.Writer, rep *ferryadmin.StatusReport) {
	st := rep.Stats
	fmt.Fprintf(w, "outbox %s (%s)\n\n", rep.Table, rep.Dialect)
	sent := "not counted (--count-sent)"
	if rep.SentCounted {
		sent = fmt.Sprint(rep.Counts["SENT"])
	}
	table(w, "  ", "STATUS\tEVENTS", []string{
		fmt.Sprintf("NEW\t%d (%d ready now)", st.New, st.Ready),
		fmt.Sprintf("SENDING\t%d", st.Sending),
		fmt.Sprintf("DEAD\t%d", st.Dead),
		fmt.Sprintf("DISCARDED\t%d", rep.Counts["DISCARDED"]),
		"SENT\t" + sent,
	})
	fmt.Fprintln(w)
	next := ""
	if rep.PendingWindowed {
		next = fmt.Sprintf(" among the %d next in line", rep.PendingWindow)
	}
	if o := rep.OldestPending; o != nil {
		fmt.Fprintf(w, "oldest pending event%s: %s old\n", next, ferryadmin.FormatAge(st.OldestPending))
		fmt.Fprintf(w, "  %s %s %s → %s, %s, attempts %d\n", o.ID, o.Type, orDash(o.Aggregate()), o.Destination, o.Status, o.Attempts)
		if o.LastError != "" {
			fmt.Fprintf(w, "  last error: %s\n", ferryadmin.OneLine(o.LastError, 300))
		}
	} else {
		fmt.Fprintln(w, "oldest pending event: none pending")
	}
	printRelays(w, rep)
	printLog(w, rep.Log)
	if len(rep.Destinations) > 0 {
		fmt.Fprintf(w, "\npending by destination%s, oldest first:\n", next)
		rows := make([]string, len(rep.Destinations))
		for i, d := range rep.Destinations {
			rows[i] = fmt.Sprintf("%s\t%d\t%d\t%s", d.Destination, d.New, d.Sending,
				ferryadmin.FormatAge(d.OldestPending))
		}
		table(w, "  ", "DESTINATION\tNEW\tSENDING\tOLDEST", rows)
	}
	if len(rep.Attempts) > 0 {
		fmt.Fprintf(w, "\nattempts of pending events%s:\n", next)
		byAttempts := map[int]map[ferrytype.Status]int64{}
		var keys []int
		for _, a := range rep.Attempts {
			if byAttempts[a.Attempts] == nil {
				byAttempts[a.Attempts] = map[ferrytype.Status]int64{}
				keys = append(keys, a.Attempts)
			}
			byAttempts[a.Attempts][a.Status] = a.Events
		}
		sort.Ints(keys)
		rows := make([]string, len(keys))
		for i, k := range keys {
			m := byAttempts[k]
			rows[i] = fmt.Sprintf("%d\t%d\t%d", k, m[ferrytype.StatusNew], m[ferrytype.StatusSending])
		}
		table(w, "  ", "ATTEMPTS\tNEW\tSENDING", rows)
	}
	if len(rep.Failed) > 0 {
		which := ""
		if next != "" {
			which = " (DEAD, and pending" + next + ")"
		}
		fmt.Fprintf(w, "\nevents that failed, oldest first%s:\n", which)
		rows := make([]string, len(rep.Failed))
		for i, e := range rep.Failed {
			rows[i] = fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s", e.ID, e.Status, e.Attempts, e.Type, e.Destination, ferryadmin.OneLine(e.LastError, 120))
		}
		table(w, "  ", "EVENT\tSTATUS\tATTEMPTS\tTYPE\tDESTINATION\tLAST ERROR", rows)
	}
	if len(rep.Attention) > 0 {
		fmt.Fprintln(w, "\nattention:")
		for _, a := range rep.Attention {
			fmt.Fprintf(w, "  - %s\n", a)
		}
	} else {
		fmt.Fprintln(w, "\nnothing needs attention")
	}
}

// printRelays prints the relays section of ferry status.
func printRelays(w io.Writer, rep *ferryadmin.StatusReport) {
	switch {
	case rep.RelaysError != "":
		fmt.Fprintf(w, "\nrelays: unknown (%s)\n", rep.RelaysError)
		return
	case len(rep.Relays) == 0 && rep.RelaysForgotten > 0:
		fmt.Fprintf(w, "\nrelays: none alive; %s silent for more than %s, not listed\n", plural(rep.RelaysForgotten, "relay"),
			ferryadmin.FormatAge(rep.RelayForgetAfter))
		return
	case len(rep.Relays) == 0:
		fmt.Fprintln(w, "\nrelays: none recorded")
		return
	}
	alive := 0
	rows := make([]string, len(rep.Relays))
	for i, r := range rep.Relays {
		state := "yes"
		if r.Alive {
			alive++
			if r.Leader {
				state = "yes, leads"
			}
		} else {
			state = "NO"
		}
		broker := "connected"
		switch {
		case !r.Alive:
			broker = "unknown (the relay is silent)"
		case !r.BrokerConnected:
			broker = "DOWN"
			if r.BrokerError != "" {
				broker += ": " + ferryadmin.OneLine(r.BrokerError, 80)
			}
		}
		mode := ""
		if r.Ordered {
			mode = " ordered"
		}
		source := orDash(r.Source)
		if r.LogRole != "" {
			source += ", " + r.LogRole
		}
		rows[i] = fmt.Sprintf("%s\t%s\t%s\t%d\t%s\t%s ago\t%s\t%s\t%d\t%d\t%d%s\t%s %s", r.ID, state, orDash(r.Host), r.PID,
			orDash(r.Version), ferryadmin.FormatAge(r.Age), ferryadmin.FormatAge(time.Since(r.StartedAt)), source, r.InFlight,
			r.SentLastMinute, r.Lanes, mode, orDash(r.Broker), broker)
	}
	forgotten := ""
	if rep.RelaysForgotten > 0 {
		forgotten = fmt.Sprintf(" (and %d silent for more than %s, not listed)", rep.RelaysForgotten,
			ferryadmin.FormatAge(rep.RelayForgetAfter))
	}
	fmt.Fprintf(w, "\nrelays: %d alive of %d recorded%s\n", alive, len(rep.Relays), forgotten)
	table(w, "  ", "RELAY\tALIVE\tHOST\tPID\tVERSION\tLAST BEAT\tUPTIME\tSOURCE\tIN FLIGHT\tSENT/MIN\tLANES\tBROKER", rows)
}

// measureLogLag asks the table's log feed how much log the database
// retains for the log relay; on failure the lag stays unknown (-1).
func measureLogLag(ctx context.Context, g *globals, li *ferryadmin.LogInfo) {
	// The relay names its slot in the source it recorded: "pgoutput slot
	// <slot> on host:port" (a slot other than the default, --log-slot).
	var slot string
	if rest, ok := strings.CutPrefix(li.Source, "pgoutput slot "); ok {
		slot, _, _ = strings.Cut(rest, " ")
	}
	feed, err := open.Feed(g.databaseURL, g.table, &open.FeedConfig{Slot: slot, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return
	}
	defer feed.Close()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if lag, err := feed.Lag(lctx); err == nil {
		li.LagBytes, li.Head = lag.Bytes, lag.Head
	}
}

// printLog prints the log relay's section of ferry status.
func printLog(w io.Writer, li *ferryadmin.LogInfo) {
	if li == nil {
		return
	}
	reader := "none (the lease ended or was given up)"
	if li.Owner != "" {
		reader = fmt.Sprintf("%s (lease %s left)", li.Owner, ferryadmin.FormatAge(li.LeaseLeft))
	}
	lag := "unknown"
	if li.LagBytes >= 0 {
		lag = fmt.Sprintf("%s of log retained (head %s)", plural(li.LagBytes, "byte"), li.Head)
	}
	standbys := "none"
	if len(li.Standbys) > 0 {
		standbys = strings.Join(li.Standbys, ", ")
	}
	fmt.Fprintf(w, "\nlog relay: %s\n", li.Source)
	table(w, "  ", "READER\tCHECKPOINT\tSAVED\tLAG\tSTANDBY", []string{fmt.Sprintf("%s\t%s\t%s ago\t%s\t%s", reader,
		orDash(string(li.Position)), ferryadmin.FormatAge(li.SavedAge), lag, standbys)})
}

package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// deadFilter is the selection flags shared by the dead subcommands.
type deadFilter struct {
	ids           []string
	aggregate     string
	typ           string
	destination   string
	since         string
	until         string
	errorContains string
	errorClass    string
	all           bool
}

// flags adds the selection flags to fl; acting commands also take --all,
// for events of status.
func (d *deadFilter) flags(fl *pflag.FlagSet, acting bool, status string) {
	fl.StringSliceVar(&d.ids, "id", nil, "event id (repeat, or comma-separate)")
	fl.StringVar(&d.aggregate, "aggregate", "", "aggregate as type:id (order:42), or :id for events without a type")
	fl.StringVar(&d.typ, "type", "", "event type")
	fl.StringVar(&d.destination, "destination", "", "destination (subject, routing key), or the type of events without one")
	fl.StringVar(&d.since, "since", "", "created at or after: a duration ago (2h) or a time (2026-01-02T15:04:05Z)")
	fl.StringVar(&d.until, "until", "", "created at or before: a duration ago (30m) or a time")
	fl.StringVar(&d.errorContains, "error-contains", "", "last error contains this text (as text: % and _ are no wildcards; ASCII case ignored)")
	fl.StringVar(&d.errorClass, "error-class", "", "last error is of this class, as ferry dead summary shows it (quote it)")
	if acting {
		fl.BoolVar(&d.all, "all", false, "act on every "+status+" event (required when no other selector is given)")
	}
}

// parseWhen turns "2h" (ago) or an RFC 3339 time into an age.
func parseWhen(flag, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return 0, usageError{fmt.Errorf("--%s %q must be positive", flag, v)}
		}
		return d, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return 0, usageError{fmt.Errorf("--%s %q: want a duration (2h) or an RFC 3339 time", flag, v)}
	}
	age := time.Since(t)
	if age <= 0 {
		return 0, usageError{fmt.Errorf("--%s %s is in the future", flag, v)}
	}
	return age, nil
}

// describe says which events the flags select, as the flags given
// ("--type OrderPaid --since 2h"); "" when none is (--all).
func (d *deadFilter) describe() string {
	var parts []string
	add := func(flag, v string) {
		if v != "" {
			if strings.ContainsAny(v, " '\"<>*$;&|") {
				v = shellQuote(v)
			}
			parts = append(parts, "--"+flag+" "+v)
		}
	}
	var ids []string
	for _, id := range d.ids {
		if id = strings.TrimSpace(id); id != "" {
			ids = append(ids, id)
		}
	}
	if len(ids) > 3 {
		ids = append(ids[:3:3], fmt.Sprintf("… (%d ids)", len(ids)))
	}
	add("id", strings.Join(ids, ","))
	add("aggregate", d.aggregate)
	add("type", d.typ)
	add("destination", d.destination)
	add("since", d.since)
	add("until", d.until)
	add("error-contains", d.errorContains)
	add("error-class", d.errorClass)
	return strings.Join(parts, " ")
}

// noMatch is the error of a command whose selection matched no event of
// status: exit code 5, one line that says what was asked.
func (d *deadFilter) noMatch(status, verb string) error {
	if sel := d.describe(); sel != "" {
		return exitError{exitNoMatch, fmt.Errorf("no %s event matches %s: nothing to %s", status, sel, verb)}
	}
	return exitError{exitNoMatch, fmt.Errorf("no event is %s: nothing to %s", status, verb)}
}

// filter builds the admin filter; selected reports whether any selector
// other than --all was given.
func (d *deadFilter) filter() (f ferryadmin.DeadFilter, selected bool, err error) {
	f = ferryadmin.DeadFilter{Type: d.typ, Destination: d.destination, ErrorContains: d.errorContains, ErrorClass: d.errorClass}
	for _, id := range d.ids {
		if id = strings.TrimSpace(id); id != "" {
			f.IDs = append(f.IDs, id)
		}
	}
	if len(f.IDs) > ferrystore.MaxListLimit {
		return f, false, usageError{fmt.Errorf("--id: at most %d ids at once", ferrystore.MaxListLimit)}
	}
	if d.aggregate != "" {
		typ, id, ok := strings.Cut(d.aggregate, ":")
		if !ok || id == "" {
			return f, false, usageError{fmt.Errorf("--aggregate %q: want type:id, e.g. order:42", d.aggregate)}
		}
		f.AggregateType, f.AggregateID = typ, id
	}
	if f.MaxAge, err = parseWhen("since", d.since); err != nil {
		return f, false, err
	}
	if f.MinAge, err = parseWhen("until", d.until); err != nil {
		return f, false, err
	}
	if f.MaxAge > 0 && f.MaxAge < f.MinAge {
		return f, false, usageError{fmt.Errorf("--since %s is after --until %s", d.since, d.until)}
	}
	if len(d.errorContains) > ferrystore.MaxErrorContains {
		return f, false, usageError{fmt.Errorf("--error-contains: at most %d bytes", ferrystore.MaxErrorContains)}
	}
	if d.errorClass != "" && ferryadmin.ErrorClass(d.errorClass) != d.errorClass {
		return f, false, usageError{fmt.Errorf("--error-class %q is not an error class (as ferry dead summary prints them; "+
			"did the shell eat its quotes?): its class is %q", d.errorClass, ferryadmin.ErrorClass(d.errorClass))}
	}
	selected = len(f.IDs) > 0 || d.aggregate != "" || d.typ != "" || d.destination != "" || d.since != "" || d.until != "" ||
		d.errorContains != "" || d.errorClass != ""
	return f, selected, nil
}

func newDead(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead",
		Short: "List, inspect, retry or discard DEAD events",
		Long: `An event is DEAD when the relay gave up on it: its retries were exhausted
(--max-attempts), and its last error says why. It is never published again
on its own. Find out why (ferry dead show), fix the cause (a missing stream or
queue, a broker permission, an oversized payload), then either:

  ferry dead retry    back to NEW with attempts 0 and the same event id: the
                      relay publishes it again, consumers deduplicate by it;
  ferry dead discard  DISCARDED, with your reason: never published; the row
                      stays as the record of that decision.

ferry dead summary groups the DEAD events by destination and class of error,
so that thousands of events come down to a few causes; select a group with
--destination and --error-class. retry and discard act on every event that
matches, in batches, and report true totals. ferry dead discarded lists the
discarded events, and ferry dead restore takes them back to DEAD.

With ordered relays (--ordered), a DEAD event holds back every later event of
its aggregate; retrying or discarding it lets them go (a consumer then sees a
gap in Ferry-Aggregate-Seq for a discarded event).`,
	}
	cmd.AddCommand(newDeadList(g), newDeadShow(g), newDeadSummary(g), newDeadAct(g, "retry"), newDeadAct(g, "discard"),
		newDeadDiscarded(g), newDeadAct(g, "restore"))
	return cmd
}

func newDeadList(g *globals) *cobra.Command {
	var (
		sel     deadFilter
		limit   int
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List DEAD events, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, _, err := sel.filter()
			if err != nil {
				return err
			}
			if limit < 1 || limit > ferrystore.MaxListLimit {
				return usageError{fmt.Errorf("--limit must be within 1..%d", ferrystore.MaxListLimit)}
			}
			a, err := openAdmin(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer a.Close()
			list, err := ferryadmin.ListDead(cmd.Context(), a, f, limit)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				return writeJSON(out, list)
			}
			if len(list.Events) == 0 {
				fmt.Fprintln(out, "no DEAD event matches")
				return nil
			}
			lines := make([]string, len(list.Events))
			for i, e := range list.Events {
				lines[i] = fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%s", e.ID, e.CreatedAt.UTC().Format(time.RFC3339), e.Type,
					orDash(e.Aggregate()), e.Destination, e.Attempts, ferryadmin.OneLine(e.LastError, 100))
			}
			table(out, "", "EVENT\tCREATED\tTYPE\tAGGREGATE\tDESTINATION\tATTEMPTS\tLAST ERROR", lines)
			if list.More {
				fmt.Fprintf(out, "(more than %d: narrow the selection or raise --limit)\n", limit)
			}
			return nil
		},
	}
	sel.flags(cmd.Flags(), false, "DEAD")
	cmd.Flags().IntVar(&limit, "limit", 50, fmt.Sprintf("most events to list (at most %d)", ferrystore.MaxListLimit))
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

func newDeadShow(g *globals) *cobra.Command {
	var (
		sel     deadFilter
		limit   int
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "show [EVENT_ID...]",
		Short: "Show events in full: payload, headers, last error, and what they hold back",
		Long: `Shows events in full. Events named by id (as arguments or --id) are shown
whatever their status. With the filters of ferry dead list (--type,
--destination, --error-class, ...), it shows the DEAD events that match,
oldest first, at most --limit. For a DEAD event of an aggregate, it also
counts the later events of that aggregate that an ordered relay holds back
until this one is retried or discarded. Exit code 5 if an id is not found, or
if no DEAD event matches the filters.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			sel.ids = append(sel.ids, args...)
			f, selected, err := sel.filter()
			if err != nil {
				return err
			}
			filtered := !onlyIDs(f) // DEAD events by filter; by id alone, events of any status
			switch {
			case !selected:
				return usageError{errors.New("name the events: EVENT_ID... or --id, or select DEAD events with the filters " +
					"of ferry dead list (--type, --destination, --error-class, ...)")}
			case limit < 1 || limit > ferrystore.MaxListLimit:
				return usageError{fmt.Errorf("--limit must be within 1..%d", ferrystore.MaxListLimit)}
			}
			ctx := cmd.Context()
			a, err := openAdmin(ctx, g)
			if err != nil {
				return err
			}
			defer a.Close()
			ids, more := f.IDs, false
			if filtered {
				list, err := ferryadmin.ListDead(ctx, a, f, limit)
				if err != nil {
					return err
				}
				if len(list.Events) == 0 {
					return sel.noMatch("DEAD", "show")
				}
				ids, more = make([]string, len(list.Events)), list.More
				for i, e := range list.Events {
					ids[i] = e.ID
				}
			}
			found, err := ferryadmin.GetEvents(ctx, a, ids)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				if err := writeJSON(out, found.Events); err != nil {
					return err
				}
			} else {
				for _, e := range found.Events {
					printEvent(out, &e.Event)
					if e.HoldsBack != nil {
						fmt.Fprintf(out, "  holds back:     %s of %s:%s (with --ordered relays)\n",
							plural(*e.HoldsBack, "later event"), e.AggregateType, e.AggregateID)
					}
					fmt.Fprintln(out)
				}
				if more {
					fmt.Fprintf(out, "(more than %d match: narrow the selection or raise --limit)\n", limit)
				}
			}
			if len(found.Missing) > 0 && !filtered {
				return exitError{exitNoMatch, fmt.Errorf("no event with id %s", strings.Join(found.Missing, ", "))}
			}
			return nil
		},
	}
	sel.flags(cmd.Flags(), false, "DEAD")
	cmd.Flags().IntVar(&limit, "limit", 10, fmt.Sprintf("with filters: most events shown (at most %d)", ferrystore.MaxListLimit))
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

// onlyIDs reports whether f selects by id and nothing else.
func onlyIDs(f ferryadmin.DeadFilter) bool {
	f.IDs = nil
	return !f.Selects()
}

func printEvent(w io.Writer, e *ferryadmin.Event) {
	p := func(k, v string) { fmt.Fprintf(w, "  %-15s %s\n", k+":", v) }
	fmt.Fprintf(w, "event %s\n", e.ID)
	p("status", string(e.Status))
	p("type", e.Type)
	p("aggregate", orDash(e.Aggregate()))
	p("destination", e.Destination)
	if e.Exchange != "" {
		p("exchange", e.Exchange)
	}
	p("attempts", fmt.Sprint(e.Attempts))
	p("created", e.CreatedAt.UTC().Format(time.RFC3339Nano))
	if e.SentAt != nil {
		p("sent", e.SentAt.UTC().Format(time.RFC3339Nano))
	}
	if e.LastError != "" {
		p("last error", e.LastError)
	}
	if e.DiscardedAt != nil {
		p("discarded", e.DiscardedAt.UTC().Format(time.RFC3339Nano)+": "+e.DiscardReason)
	} else if e.DiscardReason != "" {
		p("discard record", e.DiscardReason+" (discarded, then restored)")
	}
	if e.Malformed != "" {
		p("malformed", e.Malformed)
	}
	for k, v := range e.Headers {
		p("header", k+": "+v)
	}
	if e.RawHeaders != "" {
		p("headers", e.RawHeaders+" (as stored)")
	}
	if e.RawPayload != "" || e.Payload == nil {
		p("payload", fmt.Sprintf("%q (as stored, not JSON)", e.RawPayload))
		return
	}
	p("payload", string(e.Payload))
}

// deadAction is what one of dead retry, discard and restore does.
type deadAction struct {
	verb, done, status string // "retry", "retried", "DEAD"
	short, long        string
}

var deadActions = map[string]deadAction{
	"retry": {verb: "retry", done: "retried", status: "DEAD",
		short: "Put DEAD events back to NEW (attempts 0, same event id) for the relay to publish again",
		long: `Selects DEAD events by id or by filter and puts them back to NEW, available at
once, with attempts reset to 0. The event id does not change: consumers that
already saw the event recognise the duplicate. Fix the cause of the failure
first, or the events die again after --max-attempts.`},
	"discard": {verb: "discard", done: "discarded", status: "DEAD",
		short: "Mark DEAD events DISCARDED: never published; the row stays with your reason",
		long: `Selects DEAD events by id or by filter and marks them DISCARDED with your
--reason, the time, and your user and host name. A DISCARDED event is never
published; its row stays as the audit trail (ferry purge --discarded removes
old ones; ferry dead restore takes it back). With ordered relays, the later
events of its aggregate go on, and a consumer sees a gap in the aggregate's
sequence.`},
	"restore": {verb: "restore", done: "restored", status: "DISCARDED",
		short: "Take DISCARDED events back to DEAD, to retry or discard them again",
		long: `Selects DISCARDED events by id (as arguments or --id) or by filter and takes
them back to DEAD: not to NEW, so that nothing is published before you retry
them (ferry dead retry) or discard them again. The record of the discard
stays: "restored by <you> at <time>" is added to its reason, which ferry dead
discarded and ferry dead show print.`},
}

func newDeadAct(g *globals, verb string) *cobra.Command {
	var (
		sel      deadFilter
		reason   string
		dryRun   bool
		batch    int
		maxN     int
		jsonOut  bool
		interval time.Duration
		diedBy   string
	)
	act := deadActions[verb]
	use, args := verb, cobra.NoArgs
	if verb == "restore" {
		use, args = "restore [EVENT_ID...]", cobra.ArbitraryArgs
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: act.short,
		Long: act.long + `

Without ids, every ` + act.status + ` event matching the filters is acted on: the
command counts them, then works through all of them in batches of --batch
(each one statement, conditional on the event still being ` + act.status + `), up to
--max when set. --all is required when no filter is given. Progress goes to
stderr every --progress-interval; the last line gives the true totals: how
many matched, how many changed, how many were left alone because a relay or
another person changed them first, and how many --max left. --dry-run
counts what would change and shows the first batch, changing nothing.
Exit code 0 when every matching event was acted on or left alone for a
reason the totals state; 5 when no event matched; 1 when the run failed
part way (the totals say what was done).`,
		Args: args,
		RunE: func(cmd *cobra.Command, ids []string) error {
			ctx := cmd.Context()
			sel.ids = append(sel.ids, ids...)
			if batch < 1 || batch > ferrystore.MaxListLimit {
				return usageError{fmt.Errorf("--batch must be within 1..%d", ferrystore.MaxListLimit)}
			}
			if maxN < 0 {
				return usageError{fmt.Errorf("--max must not be negative (0: no cap)")}
			}
			f, selected, err := sel.filter()
			if err != nil {
				return err
			}
			if diedBy != "" {
				if f.DiedBy, err = time.Parse(time.RFC3339Nano, diedBy); err != nil {
					return usageError{fmt.Errorf("--died-by %q is not an RFC 3339 time (as a dry run prints it): %w", diedBy, err)}
				}
			}
			if !selected && !sel.all {
				return usageError{fmt.Errorf("select events with --id, --aggregate, --type, --destination, --since, --until, " +
					"--error-contains or --error-class, or pass --all")}
			}
			if verb == "discard" && strings.TrimSpace(reason) == "" && !dryRun {
				return usageError{fmt.Errorf("--reason is required: it is kept with the event")}
			}
			a, err := openAdmin(ctx, g)
			if err != nil {
				return err
			}
			defer a.Close()
			p := newProgress(cmd.ErrOrStderr(), interval)
			opts := ferryadmin.BulkOptions{Filter: f, All: sel.all, Batch: batch, Max: maxN, DryRun: dryRun,
				Progress: func(r ferryadmin.BulkResult) {
					if p.due() {
						done := r.Changed + r.Skipped
						p.printf("%s: %d of %s (%s), %s, %s", verb, done, plural(r.Matched, act.status+" event"),
							percent(done, r.Matched), plural(r.Batches, "batch"), p.rate(done))
					}
				}}
			var res ferryadmin.BulkResult
			switch verb {
			case "retry":
				res, err = ferryadmin.RetryDead(ctx, a, opts)
			case "discard":
				res, err = ferryadmin.DiscardDead(ctx, a, opts, reason, ferryadmin.LocalActor())
			default:
				res, err = ferryadmin.RestoreDiscarded(ctx, a, opts, ferryadmin.LocalActor())
			}
			if errors.Is(err, ferrytype.ErrInvalidConfig) {
				return err // nothing ran
			}
			// Nothing to act on is said once, on stderr, with exit code 5:
			// no totals line of a run that did nothing.
			noMatch := err == nil && res.Matched == 0 && res.Changed == 0
			noneLeft := err == nil && !noMatch && res.Changed == 0 && !dryRun
			out := cmd.OutOrStdout()
			if jsonOut {
				errText := ""
				if err != nil {
					errText = err.Error()
				}
				if werr := writeJSON(out, struct {
					ferryadmin.BulkResult
					Error string `json:"error,omitempty"`
				}{res, errText}); werr != nil && err == nil {
					err = werr
				}
			} else if !noMatch && !noneLeft {
				printBulk(out, act, res, maxN, err != nil)
			}
			switch {
			case err != nil:
				return err
			case noMatch:
				return sel.noMatch(act.status, act.verb)
			case noneLeft:
				none := "none was"
				if res.Matched == 1 {
					none = "it was not"
				}
				return exitError{exitNoMatch, fmt.Errorf("%s matched, but %s %s any more when its batch ran "+
					"(a relay or another person changed it first): nothing %s", plural(res.Matched, "event"), none,
					act.status, act.done)}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	sel.flags(fl, true, act.status)
	if verb == "discard" {
		fl.StringVar(&reason, "reason", "", "why the events are discarded (required; stored with them)")
	}
	fl.BoolVar(&dryRun, "dry-run", false, "count what would change and show the first batch; change nothing")
	fl.IntVar(&batch, "batch", ferryadmin.DefaultBulkBatch, "events changed per statement")
	fl.IntVar(&maxN, "max", 0, "most events acted on by one run (0: every event that matches)")
	if verb != "restore" {
		fl.StringVar(&diedBy, "died-by", "", "act only on the events that died at or before this instant of the database clock "+
			"(RFC 3339, as --dry-run prints it): the ones the dry run counted, not those that died since")
	}
	fl.BoolVar(&jsonOut, "json", false, "print JSON (the totals, the first 1000 ids; progress stays on stderr)")
	progressFlag(fl, &interval)
	return cmd
}

// printBulk prints the totals of a bulk run, or of the part of it done
// before it failed.
func printBulk(w io.Writer, act deadAction, res ferryadmin.BulkResult, maxN int, failed bool) {
	if res.DryRun {
		capped := ""
		if res.Left > 0 {
			capped = fmt.Sprintf("; --max %d leaves %d", maxN, res.Left)
		}
		bound := ""
		if !res.At.IsZero() {
			bound = "; to act on these and none that dies since: --died-by " + res.At.UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(w, "would %s %d of %s%s (dry run: nothing changed)%s", act.verb, res.Changed,
			plural(res.Matched, "matching "+act.status+" event"), capped, bound)
		if len(res.Preview) == 0 {
			fmt.Fprintln(w)
			return
		}
		fmt.Fprintf(w, "; the first %d:\n", len(res.Preview))
		for _, e := range res.Preview {
			fmt.Fprintf(w, "  %s %s %s %s\n", e.ID, e.Type, orDash(e.Aggregate()), ferryadmin.OneLine(e.LastError, 100))
		}
		return
	}
	var b strings.Builder
	if failed {
		fmt.Fprintf(&b, "%s stopped by an error: ", act.verb)
	}
	fmt.Fprintf(&b, "%s %d of %s in %s", act.done, res.Changed, plural(res.Matched, "matching "+act.status+" event"),
		plural(res.Batches, "batch"))
	switch act.verb {
	case "retry":
		if res.Changed == 1 {
			b.WriteString(": NEW again, attempts 0, same id; the relay publishes it on its next poll")
		} else {
			b.WriteString(": NEW again, attempts 0, same ids; the relay publishes them on its next poll")
		}
	case "discard":
		b.WriteString(": " + res.Audit)
	case "restore":
		b.WriteString(": DEAD again, for you to retry or discard; " + res.Audit)
	}
	if res.Skipped > 0 {
		fmt.Fprintf(&b, "; %d left alone: no longer %s when their batch ran (a relay or another person changed them)",
			res.Skipped, act.status)
	}
	if res.Later > 0 {
		fmt.Fprintf(&b, "; %d left alone: they died after --died-by", res.Later)
	}
	if done := res.Changed + res.Skipped + res.Later; res.Complete && done != res.Matched {
		fmt.Fprintf(&b, "; %d matched at the start, %d when reached: the selection changed during the run", res.Matched, done)
	}
	if !res.Complete && !failed {
		fmt.Fprintf(&b, "; stopped at --max %d: %d still match (run again to go on)", maxN, res.Left)
	}
	fmt.Fprintln(w, b.String())
}

func newDeadSummary(g *globals) *cobra.Command {
	var (
		sel     deadFilter
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "summary",
		Short: "Group DEAD events by destination and class of error, the largest group first",
		Long: `Groups the DEAD events (matching the filters, if any) by destination and by
class of their last error: the error's first line with its variable parts
(numbers, durations, ids, UUIDs, quoted names) replaced by <n>, <d>, <id>,
<uuid>, "<s>". Thousands of events usually come down to a few groups, one per
cause. Each group's --destination and --error-class select exactly its events
for ferry dead list, retry or discard. It reads the events without payload,
10,000 at a time; at most 200 groups are shown.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, _, err := sel.filter()
			if err != nil {
				return err
			}
			a, err := openAdmin(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer a.Close()
			sum, err := ferryadmin.SummarizeDead(cmd.Context(), a, f)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				return writeJSON(out, sum)
			}
			if sum.Total == 0 {
				fmt.Fprintln(out, "no DEAD event matches")
				return nil
			}
			fmt.Fprintf(out, "%s in %s, largest first:\n", plural(sum.Total, "DEAD event"), plural(len(sum.Groups), "group"))
			lines := make([]string, len(sum.Groups))
			for i, gr := range sum.Groups {
				lines[i] = fmt.Sprintf("%d\t%s\t%s\t%s\t%s", gr.Count, orDash(gr.Destination), strings.Join(gr.Types, ","),
					gr.Oldest.UTC().Format(time.RFC3339), gr.ErrorClass)
			}
			table(out, "", "EVENTS\tDESTINATION\tTYPES\tOLDEST\tERROR CLASS", lines)
			if sum.Truncated {
				fmt.Fprintln(out, "(more groups than shown: narrow the selection with filters)")
			}
			first := sum.Groups[0]
			fmt.Fprintf(out, "select a group: ferry dead list --destination %s --error-class %s (then retry or discard, --dry-run first)\n",
				shellQuote(first.Destination), shellQuote(first.ErrorClass))
			return nil
		},
	}
	sel.flags(cmd.Flags(), false, "DEAD")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

func newDeadDiscarded(g *globals) *cobra.Command {
	var (
		sel     deadFilter
		limit   int
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "discarded",
		Short: "List DISCARDED events with who discarded them, why and when, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, _, err := sel.filter()
			if err != nil {
				return err
			}
			if limit < 1 || limit > ferrystore.MaxListLimit {
				return usageError{fmt.Errorf("--limit must be within 1..%d", ferrystore.MaxListLimit)}
			}
			a, err := openAdmin(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer a.Close()
			list, err := ferryadmin.ListDiscarded(cmd.Context(), a, f, limit)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				return writeJSON(out, list)
			}
			if len(list.Events) == 0 {
				fmt.Fprintln(out, "no DISCARDED event matches")
				return nil
			}
			lines := make([]string, len(list.Events))
			for i, e := range list.Events {
				when := "-"
				if e.DiscardedAt != nil {
					when = e.DiscardedAt.UTC().Format(time.RFC3339)
				}
				lines[i] = fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", e.ID, e.Type, orDash(e.Aggregate()), e.Destination, when,
					ferryadmin.OneLine(e.DiscardReason, 120))
			}
			table(out, "", "EVENT\tTYPE\tAGGREGATE\tDESTINATION\tDISCARDED\tREASON (BY, AT)", lines)
			if list.More {
				fmt.Fprintf(out, "(more than %d: narrow the selection or raise --limit)\n", limit)
			}
			return nil
		},
	}
	sel.flags(cmd.Flags(), false, "DISCARDED")
	cmd.Flags().IntVar(&limit, "limit", 50, fmt.Sprintf("most events to list (at most %d)", ferrystore.MaxListLimit))
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

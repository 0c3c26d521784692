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
)

// deadFilter is the selection flags shared by the dead subcommands.
type deadFilter struct {
	ids         []string
	aggregate   string
	typ         string
	destination string
	since       string
	until       string
	all         bool
}

func (d *deadFilter) flags(fl *pflag.FlagSet, acting bool) {
	fl.StringSliceVar(&d.ids, "id", nil, "event id (repeat, or comma-separate)")
	fl.StringVar(&d.aggregate, "aggregate", "", "aggregate as type:id (order:42), or :id for events without a type")
	fl.StringVar(&d.typ, "type", "", "event type")
	fl.StringVar(&d.destination, "destination", "", "destination (subject, routing key), or the type of events without one")
	fl.StringVar(&d.since, "since", "", "created at or after: a duration ago (2h) or a time (2026-01-02T15:04:05Z)")
	fl.StringVar(&d.until, "until", "", "created at or before: a duration ago (30m) or a time")
	if acting {
		fl.BoolVar(&d.all, "all", false, "act on every DEAD event (required when no other selector is given)")
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

// filter builds the admin filter; selected reports whether any selector
// other than --all was given.
func (d *deadFilter) filter() (f ferryadmin.DeadFilter, selected bool, err error) {
	f = ferryadmin.DeadFilter{Type: d.typ, Destination: d.destination}
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
	selected = len(f.IDs) > 0 || d.aggregate != "" || d.typ != "" || d.destination != "" || d.since != "" || d.until != ""
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

With ordered relays (--ordered), a DEAD event holds back every later event of
its aggregate; retrying or discarding it lets them go (a consumer then sees a
gap in Ferry-Aggregate-Seq for a discarded event).`,
	}
	cmd.AddCommand(newDeadList(g), newDeadShow(g), newDeadAct(g, "retry"), newDeadAct(g, "discard"))
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
	sel.flags(cmd.Flags(), false)
	cmd.Flags().IntVar(&limit, "limit", 50, fmt.Sprintf("most events to list (at most %d)", ferrystore.MaxListLimit))
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

func newDeadShow(g *globals) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "show EVENT_ID...",
		Short: "Show events in full: payload, headers, last error, and what they hold back",
		Long: `Shows each event (of any status) in full. For a DEAD event of an aggregate, it
also counts the later events of that aggregate that an ordered relay holds back
until this one is retried or discarded. Exit code 5 if an id is not found.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, ids []string) error {
			if len(ids) > ferrystore.MaxListLimit {
				return usageError{fmt.Errorf("at most %d ids at once", ferrystore.MaxListLimit)}
			}
			ctx := cmd.Context()
			a, err := openAdmin(ctx, g)
			if err != nil {
				return err
			}
			defer a.Close()
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
						fmt.Fprintf(out, "  holds back:     %d later events of %s:%s (with --ordered relays)\n",
							*e.HoldsBack, e.AggregateType, e.AggregateID)
					}
					fmt.Fprintln(out)
				}
			}
			if len(found.Missing) > 0 {
				return exitError{exitNoMatch, fmt.Errorf("no event with id %s", strings.Join(found.Missing, ", "))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
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

func newDeadAct(g *globals, verb string) *cobra.Command {
	var (
		sel     deadFilter
		reason  string
		dryRun  bool
		batch   int
		maxN    int
		jsonOut bool
	)
	short := "Put DEAD events back to NEW (attempts 0, same event id) for the relay to publish again"
	long := `Selects DEAD events by id or by filter and puts them back to NEW, available at
once, with attempts reset to 0. The event id does not change: consumers that
already saw the event recognise the duplicate. Fix the cause of the failure
first, or the events die again after --max-attempts.`
	if verb == "discard" {
		short = "Mark DEAD events DISCARDED: never published; the row stays with your reason"
		long = `Selects DEAD events by id or by filter and marks them DISCARDED with your
--reason, the time, and your user and host name. A DISCARDED event is never
published; its row stays as the audit trail (ferry purge --discarded removes
old ones). With ordered relays, the later events of its aggregate go on, and a
consumer sees a gap in the aggregate's sequence.`
	}
	cmd := &cobra.Command{
		Use:   verb,
		Short: short,
		Long: long + `

Without --id, every DEAD event matching the filters is acted on, in batches of
--batch, up to --max; --all is required when no filter is given. --dry-run
lists what would change. Exit code 5 when no DEAD event matched.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if batch < 1 || batch > ferrystore.MaxListLimit {
				return usageError{fmt.Errorf("--batch must be within 1..%d", ferrystore.MaxListLimit)}
			}
			if maxN < 1 {
				return usageError{fmt.Errorf("--max must be positive")}
			}
			f, selected, err := sel.filter()
			if err != nil {
				return err
			}
			if !selected && !sel.all {
				return usageError{fmt.Errorf("select events with --id, --aggregate, --type, --destination, --since or --until, or pass --all")}
			}
			if verb == "discard" && strings.TrimSpace(reason) == "" && !dryRun {
				return usageError{fmt.Errorf("--reason is required: it is kept with the event")}
			}
			a, err := openAdmin(ctx, g)
			if err != nil {
				return err
			}
			defer a.Close()
			opts := ferryadmin.BulkOptions{Filter: f, All: sel.all, Batch: batch, Max: maxN, DryRun: dryRun}
			var res ferryadmin.BulkResult
			if verb == "retry" {
				res, err = ferryadmin.RetryDead(ctx, a, opts)
			} else {
				res, err = ferryadmin.DiscardDead(ctx, a, opts, reason, ferryadmin.LocalActor())
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				if err := writeJSON(out, struct {
					Action  string   `json:"action"`
					DryRun  bool     `json:"dry_run"`
					Changed int64    `json:"changed"`
					IDs     []string `json:"ids"`
				}{res.Action, res.DryRun, res.Changed, res.IDs}); err != nil {
					return err
				}
			} else {
				switch {
				case dryRun:
					fmt.Fprintf(out, "would %s %d events (first page shown):\n", verb, len(res.IDs))
					for _, e := range res.Preview {
						fmt.Fprintf(out, "  %s %s %s %s\n", e.ID, e.Type, orDash(e.Aggregate()), ferryadmin.OneLine(e.LastError, 100))
					}
				case verb == "retry":
					fmt.Fprintf(out, "retried %d events: NEW again, attempts 0, same ids; the relay publishes them on its next poll\n", res.Changed)
				default:
					fmt.Fprintf(out, "discarded %d events: %s\n", res.Changed, res.Audit)
				}
			}
			if res.Changed == 0 {
				return exitError{exitNoMatch, errors.New("no DEAD event matched")}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	sel.flags(fl, true)
	if verb == "discard" {
		fl.StringVar(&reason, "reason", "", "why the events are discarded (required; stored with them)")
	}
	fl.BoolVar(&dryRun, "dry-run", false, "show what would change, change nothing")
	fl.IntVar(&batch, "batch", 500, "events changed per statement")
	fl.IntVar(&maxN, "max", 10000, "most events changed by one run")
	fl.BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

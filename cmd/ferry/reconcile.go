package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/open"
)

type reconcileFlags struct {
	window, grace, pendingOlderThan time.Duration
	limit, batch, scanLimit         int
	json                            bool
}

func newReconcile(g *globals) *cobra.Command {
	f := &reconcileFlags{}
	cmd := &cobra.Command{
		Use:   "reconcile",
		Short: "Find business rows without their event, SENT events without their effect, and events pending too long",
		Long: `Checks what compensation alone can miss:

  missing events   for each check in the config file's reconcile.checks, the
                   rows of a business table (created within --window, older
                   than --grace) that have no outbox event of the expected
                   type whose aggregate id is the row's key: a change that
                   committed without its event (a code path that skipped the
                   outbox, a hand-written fix, a restored backup);
  missing effects  for each mapping in reconcile.effects, the SENT events of
                   a type, sent older_than ago (and within --window), for
                   which the consumer's inbox has no marker under the
                   event's business key: an event the broker took that the
                   consumer never applied (parked as poison or conflicting,
                   lost to a misrouted queue, a consumer not deployed);
  stuck events     NEW or SENDING events created longer than
                   --pending-older-than ago (0 skips this check).

A check names a table, its key and time columns, and the event's aggregate
type and type:

  reconcile:
    checks:
      - name: orders-placed
        table: purchase_order
        key_column: id
        time_column: created_at
        aggregate_type: order
        event_type: OrderPlaced

The business table must be in the outbox's database. Names are validated and
quoted. Keep --window shorter than the relay's --retention, or rows whose SENT
events were purged are reported as missing.

An effect mapping names the consumer, its database, the event type and the
business key the consumer records, built from the event like the consumer
builds it:

  reconcile:
    effects:
      - name: points-awarded
        consumer: points-award
        inbox_database_url_env: POINTS_DATABASE_URL   # or inbox_database_url: mysql://...
        marker_table: consumed_operation
        event_type: OrderPaid
        aggregate_type: order
        key: "order:{aggregate_id}:paid"
        older_than: 5m

Key placeholders: {event_id}, {aggregate_type}, {aggregate_id},
{aggregate_seq}, {event_type}, {destination}, {payload.member} (nested:
{payload.order.id}; numbers as written in the payload), {header.Name}; {{ and
}} are literal braces. The outbox and the consumer's database may differ, even
in dialect: each page of --batch SENT events is read from the outbox, then
their keys are looked up in the inbox, one query each; nothing is joined. At
most --scan-limit events are read per mapping. --window may not exceed the
inbox's replay window (inbox.replay_window, 168h): markers younger than it
are never purged, so a missing one is a finding, not retention.

SENT means the broker took the event, never that a consumer applied it: only
an effect mapping checks the consumer's side, and only for the consumers it
names.

Exit code 4 when anything is found.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runReconcile(cmd, g, f) },
	}
	fl := cmd.Flags()
	fl.DurationVar(&f.window, "window", 24*time.Hour, "how far back business rows are checked")
	bindEnv(fl, "window", "FERRY_RECONCILE_WINDOW")
	fl.DurationVar(&f.grace, "grace", time.Minute, "skip business rows younger than this (clock skew between the application and the database)")
	bindEnv(fl, "grace", "FERRY_RECONCILE_GRACE")
	fl.DurationVar(&f.pendingOlderThan, "pending-older-than", 15*time.Minute, "report NEW or SENDING events older than this (0: skip)")
	bindEnv(fl, "pending-older-than", "FERRY_RECONCILE_PENDING_OLDER_THAN")
	fl.IntVar(&f.limit, "limit", 100, fmt.Sprintf("most findings listed per check (at most %d)", ferrystore.MaxListLimit))
	bindEnv(fl, "limit", "FERRY_RECONCILE_LIMIT")
	fl.IntVar(&f.batch, "batch", 500, fmt.Sprintf("effects: SENT events read per page, and keys looked up per inbox query (at most %d)",
		ferrystore.MaxListLimit))
	bindEnv(fl, "batch", "FERRY_RECONCILE_BATCH")
	fl.IntVar(&f.scanLimit, "scan-limit", 100000, "effects: most SENT events read per mapping in one run (0: no bound)")
	bindEnv(fl, "scan-limit", "FERRY_RECONCILE_SCAN_LIMIT")
	fl.BoolVar(&f.json, "json", false, "print JSON")
	return cmd
}

func runReconcile(cmd *cobra.Command, g *globals, f *reconcileFlags) error {
	ctx := cmd.Context()
	var (
		checks  []ferryadmin.Check
		effects []ferryadmin.Effect
	)
	if g.file != nil {
		checks, effects = g.file.checks, g.file.effects
	}
	switch {
	case f.limit < 1 || f.limit >= ferrystore.MaxListLimit:
		return usageError{fmt.Errorf("--limit must be within 1..%d", ferrystore.MaxListLimit-1)}
	case f.pendingOlderThan < 0:
		return usageError{fmt.Errorf("--pending-older-than must not be negative")}
	case f.window <= 0:
		return usageError{fmt.Errorf("--window must be positive")}
	case f.grace < 0:
		return usageError{fmt.Errorf("--grace must not be negative")}
	case len(checks) == 0 && len(effects) == 0 && f.pendingOlderThan == 0:
		return usageError{fmt.Errorf("nothing to check: add reconcile.checks or reconcile.effects to the config file (--config), " +
			"or set --pending-older-than")}
	case len(checks) > 0 && (f.window <= 0 || f.grace < 0 || f.grace >= f.window):
		return usageError{fmt.Errorf("--grace %s must be within 0..--window (%s)", f.grace, f.window)}
	case f.batch < 1 || f.batch > ferrystore.MaxListLimit:
		return usageError{fmt.Errorf("--batch must be within 1..%d", ferrystore.MaxListLimit)}
	case f.scanLimit < 0:
		return usageError{fmt.Errorf("--scan-limit must not be negative")}
	}
	replay, err := checkEffectWindow(g, effects, f.window)
	if err != nil {
		return err
	}
	var retention time.Duration
	if len(checks) > 0 {
		if v := g.fileSetting("relay.retention", "FERRY_RETENTION"); v != "" {
			if ret, err := time.ParseDuration(v); err == nil && ret > 0 {
				if f.window > ret {
					return usageError{fmt.Errorf("--window %s is longer than the relay's retention %s: rows whose SENT "+
						"events were purged would be reported missing", f.window, ret)}
				}
				retention = ret
			}
		}
	}
	if effects, err = resolveInboxURLs(effects); err != nil {
		return err
	}
	a, err := openAdmin(ctx, g)
	if err != nil {
		return err
	}
	defer a.Close()
	rep, err := ferryadmin.Reconcile(ctx, a, ferryadmin.ReconcileOptions{Checks: checks, Effects: effects,
		Window: f.window, Grace: f.grace, PendingOlderThan: f.pendingOlderThan, Limit: f.limit, Batch: f.batch,
		ScanLimit: f.scanLimit, ReplayWindow: replay, Retention: retention, OpenInbox: openInbox})
	if err != nil {
		return err
	}

	out := cmd.OutOrStdout()
	if f.json {
		if err := writeJSON(out, rep); err != nil {
			return err
		}
	} else {
		printReconcile(out, &rep, f)
	}
	if rep.Findings > 0 {
		return exitError{exitFindings, fmt.Errorf("reconcile: %s", plural(rep.Findings, "finding"))}
	}
	return nil
}

func printReconcile(out io.Writer, rep *ferryadmin.ReconcileReport, f *reconcileFlags) {
	fmt.Fprintf(out, "reconcile outbox %s (%s)\n", rep.Table, rep.Dialect)
	for _, c := range rep.Checks {
		more := ""
		if c.More {
			more = fmt.Sprintf(" (first %d shown)", f.limit)
		}
		fmt.Fprintf(out, "\ncheck %s: %s.%s by %s, created %s to %s ago: %s without a %s event (aggregate type %q)%s\n",
			c.Name, c.Table, c.KeyColumn, c.TimeColumn, ferryadmin.FormatAge(f.grace), ferryadmin.FormatAge(f.window),
			plural(len(c.Missing), "row"), c.EventType,
			c.AggregateType, more)
		if len(c.Missing) > 0 {
			rows := make([]string, len(c.Missing))
			for i, m := range c.Missing {
				rows[i] = fmt.Sprintf("%s\t%s", m.Key, m.Time.UTC().Format(time.RFC3339))
			}
			table(out, "  ", "KEY\t"+c.TimeColumn, rows)
		}
	}
	for _, e := range rep.Effects {
		printEffect(out, &e, f)
	}
	if s := rep.Stuck; s != nil {
		more := ""
		if s.More {
			more = fmt.Sprintf(" (first %d shown)", f.limit)
		}
		fmt.Fprintf(out, "\nevents pending longer than %s: %d%s\n", ferryadmin.FormatAge(f.pendingOlderThan), len(s.Events), more)
		if len(s.Events) > 0 {
			rows := make([]string, len(s.Events))
			for i, e := range s.Events {
				rows[i] = fmt.Sprintf("%s\t%s\t%s\t%d\t%s\t%s", e.ID, e.Status, e.Type, e.Attempts,
					e.CreatedAt.UTC().Format(time.RFC3339), ferryadmin.OneLine(e.LastError, 100))
			}
			table(out, "  ", "EVENT\tSTATUS\tTYPE\tATTEMPTS\tCREATED\tLAST ERROR", rows)
		}
	}
	if rep.Findings == 0 {
		fmt.Fprintln(out, "\nnothing found")
	} else {
		fmt.Fprintf(out, "\n%s\n", plural(rep.Findings, "finding"))
	}
}

// checkEffectWindow refuses a --window longer than the inbox's replay
// window when effects are checked: markers are kept at least that long
// (ferry purge --markers refuses less), so within it a missing marker is a
// finding, never retention.
func checkEffectWindow(g *globals, effects []ferryadmin.Effect, window time.Duration) (time.Duration, error) {
	if len(effects) == 0 {
		return 0, nil
	}
	replay := ferry.DefaultReplayWindow
	if v := g.fileSetting("inbox.replay_window", "FERRY_REPLAY_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, usageError{fmt.Errorf("inbox.replay_window %q: want a positive duration", v)}
		}
		replay = d
	}
	if window > replay {
		return 0, usageError{fmt.Errorf("--window %s is longer than the inbox's replay window %s: markers older than that "+
			"may have been purged, and their events would be reported without effect", window, replay)}
	}
	for _, e := range effects {
		if e.OlderThan >= window {
			return 0, usageError{fmt.Errorf("reconcile effect %s: older_than %s must be shorter than --window %s", e.Name, e.OlderThan, window)}
		}
	}
	return replay, nil
}

func printEffect(out io.Writer, e *ferryadmin.EffectResult, f *reconcileFlags) {
	agg := ""
	if e.AggregateType != "" {
		agg = fmt.Sprintf(" (aggregate type %q)", e.AggregateType)
	}
	fmt.Fprintf(out, "\neffect %s: %s events%s sent %s to %s ago, consumer %s in %s, marker key %s\n",
		e.Name, e.EventType, agg, ferryadmin.FormatAge(e.OlderThan), ferryadmin.FormatAge(f.window), e.Consumer, e.InboxDatabase, e.Key)
	scope := "all of them"
	if !e.Complete {
		scope = "stopped there"
		if !e.More {
			scope += fmt.Sprintf(" (--scan-limit %d)", f.scanLimit)
		}
	}
	more := ""
	if e.More {
		more = fmt.Sprintf(", first %d shown", f.limit)
	}
	fmt.Fprintf(out, "  read %s (%s): %d without the consumer's marker%s\n", plural(e.Scanned, "SENT event"), scope,
		len(e.Missing), more)
	if len(e.Missing) > 0 {
		rows := make([]string, len(e.Missing))
		for i, m := range e.Missing {
			rows[i] = fmt.Sprintf("%s\t%s\t%s\t%s", m.EventID, orDash(m.Key), m.SentAt.UTC().Format(time.RFC3339), m.Problem)
		}
		table(out, "  ", "EVENT\tKEY\tSENT\tPROBLEM", rows)
	}
}

// openInbox opens a consumer's inbox for reconcile's effect checks, by the
// URL's scheme.
func openInbox(ctx context.Context, url, markerTable string) (ferrystore.InboxStore, error) {
	return open.InboxStore(ctx, url, &open.InboxConfig{MarkerTable: markerTable})
}

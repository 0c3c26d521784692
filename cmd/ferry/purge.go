package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryadmin"
)

type purgeFlags struct {
	olderThan    time.Duration
	batch        int
	maxBatches   int
	pause        time.Duration
	discarded    bool
	markers      bool
	keys         bool
	replayWindow time.Duration
	inbox        inboxTables
	json         bool
	dryRun       bool
	progress     time.Duration
}

func newPurge(g *globals) *cobra.Command {
	f := &purgeFlags{}
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Delete SENT events (or, with --markers, inbox markers) older than --older-than, in bounded batches",
		Long: `Deletes SENT events sent more than --older-than ago, --batch rows per
statement, so that no statement holds many row locks for long; with
--discarded, DISCARDED events discarded that long ago too. NEW, SENDING and DEAD
events are never deleted, however old.

The relay can do the same continuously (--retention); this command is for a
cron job or a one-off clean-up. Keep --older-than longer than the broker's
duplicate window and than reconcile's --window.

With --markers, it deletes a consumer database's inbox markers instead
(--database-url is then the consumer's database, --marker-table its marker
table), for every consumer in that table. A marker is what makes a redelivered
event a duplicate: once it is gone, the same event delivered again is applied
again. So --older-than must be at least --replay-window (168h, like the
library's InboxConfig.ReplayWindow; set it to the longest time after which any
of your consumers may see an event again: broker redelivery, a stream replay,
a DEAD event retried), and the command refuses anything shorter.

With --idempotency-keys, it deletes the expired idempotency keys (ferryhttp's
Idempotency-Key middleware) of the database at --database-url, from
--key-table. Each key expires at its own time, the middleware's Retention
after its response was stored (24h by default), so --older-than is not used:
a key is deleted only once it expired, in progress or not. A retry that comes
after its key expired runs as a new request.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runPurge(cmd, g, f) },
	}
	fl := cmd.Flags()
	fl.DurationVar(&f.olderThan, "older-than", 0, "delete events sent (or discarded) longer ago than this (required)")
	bindEnv(fl, "older-than", "FERRY_PURGE_OLDER_THAN")
	fl.IntVar(&f.batch, "batch", 1000, "rows deleted per statement")
	bindEnv(fl, "batch", "FERRY_PURGE_BATCH")
	fl.IntVar(&f.maxBatches, "max-batches", 0, "stop after this many statements per kind (0: until none is left)")
	fl.DurationVar(&f.pause, "pause", 0, "wait between statements, to spare a busy database")
	bindEnv(fl, "pause", "FERRY_PURGE_PAUSE")
	fl.BoolVar(&f.discarded, "discarded", false, "also delete DISCARDED events discarded longer ago than --older-than")
	fl.BoolVar(&f.markers, "markers", false, "delete inbox markers of the consumer database at --database-url instead of events")
	fl.BoolVar(&f.keys, "idempotency-keys", false, "delete expired idempotency keys (ferryhttp) of the database at --database-url instead of events")
	fl.DurationVar(&f.replayWindow, "replay-window", ferry.DefaultReplayWindow,
		"with --markers: the longest time after which an event may be delivered again; --older-than may not be shorter")
	bindShared(fl, "replay-window", "FERRY_REPLAY_WINDOW", "inbox.replay_window")
	f.inbox.flags(fl, true)
	fl.BoolVar(&f.json, "json", false, "print JSON")
	fl.BoolVar(&f.dryRun, "dry-run", false, "count what would be deleted now, delete nothing")
	progressFlag(fl, &f.progress)
	return cmd
}

func runPurge(cmd *cobra.Command, g *globals, f *purgeFlags) error {
	ctx := cmd.Context()
	switch {
	case f.keys && (f.markers || f.discarded):
		return usageError{fmt.Errorf("--idempotency-keys purges only keys: run --markers or --discarded separately")}
	case f.keys && f.olderThan != 0:
		return usageError{fmt.Errorf("--idempotency-keys deletes keys once they expired (the middleware's Retention): --older-than does not apply")}
	case !f.keys && f.olderThan <= 0:
		return usageError{fmt.Errorf("--older-than is required and must be positive (e.g. 168h)")}
	case f.batch < 1 || f.batch > 100000:
		return usageError{fmt.Errorf("--batch must be within 1..100000")}
	case f.maxBatches < 0 || f.pause < 0:
		return usageError{fmt.Errorf("--max-batches and --pause must not be negative")}
	case f.markers && f.discarded:
		return usageError{fmt.Errorf("--markers and --discarded purge different databases: run them separately")}
	case f.markers && f.replayWindow <= 0:
		return usageError{fmt.Errorf("--replay-window must be positive")}
	case f.markers && f.olderThan < f.replayWindow:
		// Inbox.PurgeMarkers refuses the same, for the same reason.
		return usageError{fmt.Errorf("--older-than %s is shorter than the replay window %s: an event delivered again "+
			"after its marker is gone would be applied again (raise --older-than, or --replay-window if your "+
			"consumers truly never see an event again after that long)", f.olderThan, f.replayWindow)}
	}
	p := newProgress(cmd.ErrOrStderr(), f.progress)
	opts := ferryadmin.PurgeOptions{OlderThan: f.olderThan, Batch: f.batch, MaxBatches: f.maxBatches, Pause: f.pause,
		Discarded: f.discarded, ReplayWindow: f.replayWindow, DryRun: f.dryRun,
		Progress: func(r ferryadmin.PurgeResult) {
			if p.due() {
				p.printf("purge %s: %d deleted in %s, %s", r.Kind, r.Deleted, plural(r.Statements, "statement"), p.rate(r.Deleted))
			}
		}}
	var (
		rep ferryadmin.PurgeReport
		err error // of the purge: what it did before it is printed, then the error
	)
	if f.keys {
		s, oerr := f.inbox.open(cmd, g)
		if oerr != nil {
			return oerr
		}
		defer s.Close()
		rep, err = ferryadmin.PurgeIdempotencyKeys(ctx, s, opts)
		rep.Table = f.inbox.keys
	} else if f.markers {
		s, oerr := f.inbox.open(cmd, g)
		if oerr != nil {
			return oerr
		}
		defer s.Close()
		rep, err = ferryadmin.PurgeMarkers(ctx, s, opts)
		rep.Table = f.inbox.markers
	} else {
		a, oerr := openAdmin(ctx, g)
		if oerr != nil {
			return oerr
		}
		defer a.Close()
		rep, err = ferryadmin.PurgeEvents(ctx, a, opts)
	}
	if err != nil && len(rep.Results) == 0 {
		return err
	}
	out := cmd.OutOrStdout()
	if f.json {
		if werr := writeJSON(out, rep); err == nil {
			err = werr
		}
		return err
	}
	table := rep.Table
	for i, r := range rep.Results {
		if rep.DryRun {
			what := plural(r.Eligible, strings.ToUpper(r.Kind)+" event") + " older than " + f.olderThan.String()
			switch r.Kind {
			case "markers":
				what = plural(r.Eligible, "inbox marker") + " older than " + f.olderThan.String()
			case "idempotency-keys":
				what = plural(r.Eligible, "expired idempotency key")
			}
			fmt.Fprintf(out, "%s: would delete %s (dry run: nothing deleted)\n", table, what)
			continue
		}
		left := ""
		switch {
		case err != nil && i == len(rep.Results)-1:
			left = " before the error"
		case !r.Complete:
			left = " (stopped at --max-batches; more may be left)"
		}
		what := plural(r.Deleted, strings.ToUpper(r.Kind)+" event")
		switch r.Kind {
		case "markers":
			what = plural(r.Deleted, "inbox marker")
		case "idempotency-keys":
			fmt.Fprintf(out, "%s: deleted %s in %s%s\n", table, plural(r.Deleted, "expired idempotency key"),
				plural(r.Statements, "statement"), left)
			continue
		}
		fmt.Fprintf(out, "%s: deleted %s older than %s in %s%s\n",
			table, what, f.olderThan, plural(r.Statements, "statement"), left)
	}
	return err
}

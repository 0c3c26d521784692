package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

type purgeFlags struct {
	olderThan  time.Duration
	batch      int
	maxBatches int
	pause      time.Duration
	discarded  bool
	json       bool
}

// purgeTarget is one kind of row retention deletes. Each deletes only rows
// in a final state (SENT, DISCARDED), never a pending one, at most limit
// per call. The consumer inbox adds its processed markers here.
type purgeTarget struct {
	name string
	run  func(ctx context.Context, olderThan time.Duration, limit int) (int64, error)
}

func newPurge(g *globals) *cobra.Command {
	f := &purgeFlags{}
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Delete SENT events older than --older-than, in bounded batches",
		Long: `Deletes SENT events sent more than --older-than ago, --batch rows per
statement, so that no statement holds many row locks for long; with
--discarded, DISCARDED events discarded that long ago too. NEW, SENDING and DEAD
events are never deleted, however old.

The relay can do the same continuously (--retention); this command is for a
cron job or a one-off clean-up. Keep --older-than longer than the broker's
duplicate window and than reconcile's --window.`,
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
	fl.BoolVar(&f.json, "json", false, "print JSON")
	return cmd
}

func runPurge(cmd *cobra.Command, g *globals, f *purgeFlags) error {
	ctx := cmd.Context()
	switch {
	case f.olderThan <= 0:
		return usageError{fmt.Errorf("--older-than is required and must be positive (e.g. 168h)")}
	case f.batch < 1 || f.batch > 100000:
		return usageError{fmt.Errorf("--batch must be within 1..100000")}
	case f.maxBatches < 0 || f.pause < 0:
		return usageError{fmt.Errorf("--max-batches and --pause must not be negative")}
	}
	a, err := openAdmin(ctx, g)
	if err != nil {
		return err
	}
	defer a.Close()
	targets := []purgeTarget{{"sent", a.PurgeSent}}
	if f.discarded {
		targets = append(targets, purgeTarget{"discarded", a.PurgeDiscarded})
	}
	type result struct {
		Kind       string `json:"kind"`
		Deleted    int64  `json:"deleted"`
		Statements int    `json:"statements"`
		Complete   bool   `json:"complete"`
	}
	var results []result
	for _, t := range targets {
		r := result{Kind: t.name}
		for f.maxBatches == 0 || r.Statements < f.maxBatches {
			n, err := t.run(ctx, f.olderThan, f.batch)
			if err != nil {
				return fmt.Errorf("purge %s after %d rows: %w", t.name, r.Deleted, err)
			}
			r.Statements++
			r.Deleted += n
			if n < int64(f.batch) {
				r.Complete = true
				break
			}
			if f.pause > 0 {
				select {
				case <-ctx.Done():
					return fmt.Errorf("purge %s interrupted after %d rows: %w", t.name, r.Deleted, ctx.Err())
				case <-time.After(f.pause):
				}
			}
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("purge %s interrupted after %d rows: %w", t.name, r.Deleted, err)
			}
		}
		results = append(results, r)
	}
	out := cmd.OutOrStdout()
	if f.json {
		return writeJSON(out, struct {
			Table            string   `json:"table"`
			OlderThanSeconds float64  `json:"older_than_seconds"`
			Results          []result `json:"results"`
		}{a.Table(), f.olderThan.Seconds(), results})
	}
	for _, r := range results {
		left := ""
		if !r.Complete {
			left = " (stopped at --max-batches; more may be left)"
		}
		fmt.Fprintf(out, "%s: deleted %d %s events older than %s in %d statements%s\n",
			a.Table(), r.Deleted, strings.ToUpper(r.Kind), f.olderThan, r.Statements, left)
	}
	return nil
}

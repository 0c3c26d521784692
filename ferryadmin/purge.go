package ferryadmin

import (
	"context"
	"fmt"
	"time"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
)

// DefaultPurgeBatch is the default of PurgeOptions.Batch.
const DefaultPurgeBatch = 1000

// MaxPurgeBatch bounds PurgeOptions.Batch.
const MaxPurgeBatch = 100000

// PurgeOptions bounds a purge.
type PurgeOptions struct {
	// OlderThan is the age, by the database clock, past which rows are
	// deleted: SENT events by their sent time, DISCARDED events by their
	// discard time, markers by their creation. Required.
	OlderThan time.Duration
	// Batch is the most rows one statement deletes, 1 to MaxPurgeBatch,
	// so that no statement holds many row locks for long. Default (zero)
	// DefaultPurgeBatch.
	Batch int
	// MaxBatches stops each kind after this many statements. Default
	// (zero): until none is left.
	MaxBatches int
	// Pause waits between statements, to spare a busy database. Default
	// none.
	Pause time.Duration
	// Progress, when set, is called after each statement with the kind's
	// result so far.
	Progress func(PurgeResult)
	// Discarded makes PurgeEvents delete DISCARDED events too, discarded
	// more than OlderThan ago. Default false: SENT events only.
	Discarded bool
	// DryRun deletes nothing: each result counts in Eligible the rows a
	// purge would delete now (with one count statement per kind), and
	// Deleted stays 0.
	DryRun bool
	// ReplayWindow is, for PurgeMarkers, the longest time after which any
	// consumer may see an event again (broker redelivery, a stream replay,
	// a DEAD event retried); OlderThan may not be shorter. Default (zero)
	// ferry.DefaultReplayWindow.
	ReplayWindow time.Duration
}

// PurgeReport is what a purge deleted.
type PurgeReport struct {
	// Table is the outbox table, or the marker table of PurgeMarkers when
	// the caller names it (the InboxStore does not say).
	Table            string        `json:"table"`
	OlderThanSeconds float64       `json:"older_than_seconds"`
	DryRun           bool          `json:"dry_run,omitempty"`
	Results          []PurgeResult `json:"results"`
}

// PurgeResult is what a purge deleted of one kind of row.
type PurgeResult struct {
	// Kind is "sent", "discarded", "markers" or "idempotency-keys".
	Kind string `json:"kind"`
	// Deleted counts the rows deleted, Statements the statements run.
	Deleted    int64 `json:"deleted"`
	Statements int   `json:"statements"`
	// Complete is true when the last statement found fewer rows than a
	// batch: none of this kind was left. False when MaxBatches stopped
	// the purge.
	Complete bool `json:"complete"`
	// Eligible counts, in a dry run, the rows a purge would delete now;
	// a dry run sets only Kind and Eligible.
	Eligible int64 `json:"eligible,omitempty"`
}

func (o PurgeOptions) withDefaults(age bool) (PurgeOptions, error) {
	if o.Batch == 0 {
		o.Batch = DefaultPurgeBatch
	}
	switch {
	case age && o.OlderThan <= 0:
		return o, invalid("PurgeOptions.OlderThan must be positive")
	case o.Batch < 1 || o.Batch > MaxPurgeBatch:
		return o, invalid("PurgeOptions.Batch %d must be within 1..%d", o.Batch, MaxPurgeBatch)
	case o.MaxBatches < 0 || o.Pause < 0:
		return o, invalid("PurgeOptions.MaxBatches and Pause must not be negative")
	}
	return o, nil
}

// PurgeEvents deletes SENT events sent more than opts.OlderThan ago and,
// with opts.Discarded, DISCARDED events discarded that long ago, in statements
// of at most opts.Batch rows. It never deletes a NEW, SENDING or DEAD
// event, however old: each statement is conditional on the final status.
// On an error, the report says what was deleted before it.
func PurgeEvents(ctx context.Context, a ferrystore.Admin, opts PurgeOptions) (PurgeReport, error) {
	if err := needStore("PurgeEvents", a); err != nil {
		return PurgeReport{}, err
	}
	count := func(discarded bool) func(context.Context, time.Duration) (int64, error) {
		return func(ctx context.Context, olderThan time.Duration) (int64, error) {
			s, d, err := a.Purgeable(ctx, olderThan)
			if discarded {
				return d, err
			}
			return s, err
		}
	}
	kinds := []purgeKind{{name: "sent", run: a.PurgeSent, count: count(false)}}
	if opts.Discarded {
		kinds = append(kinds, purgeKind{name: "discarded", run: a.PurgeDiscarded, count: count(true)})
	}
	return purge(ctx, a.Table(), kinds, opts)
}

// PurgeMarkers deletes the inbox markers of every consumer of s created
// more than opts.OlderThan ago, in statements of at most opts.Batch rows.
// A marker is what makes a redelivered event a duplicate, so it refuses
// an OlderThan shorter than opts.ReplayWindow.
func PurgeMarkers(ctx context.Context, s ferrystore.InboxStore, opts PurgeOptions) (PurgeReport, error) {
	if err := needStore("PurgeMarkers", s); err != nil {
		return PurgeReport{}, err
	}
	replayWindow := opts.ReplayWindow
	if replayWindow == 0 {
		replayWindow = ferry.DefaultReplayWindow
	}
	switch {
	case replayWindow < 0:
		return PurgeReport{Results: []PurgeResult{}}, invalid("the replay window must be positive")
	case opts.OlderThan < replayWindow:
		return PurgeReport{Results: []PurgeResult{}}, invalid("PurgeOptions.OlderThan %s is shorter than the replay window %s: "+
			"an event delivered again after its marker is gone would be applied again", opts.OlderThan, replayWindow)
	}
	return purge(ctx, "", []purgeKind{{name: "markers", run: s.PurgeMarkers, count: s.PurgeableMarkers}}, opts)
}

// PurgeIdempotencyKeys deletes the expired idempotency keys of s
// (ferryhttp), in statements of at most opts.Batch rows: each key expires
// at its own time (ferryhttp.Config.Retention after its completion), so
// opts.OlderThan is not used. A key in progress is deleted only once it
// expired too.
func PurgeIdempotencyKeys(ctx context.Context, s ferrystore.IdempotencyStore, opts PurgeOptions) (PurgeReport, error) {
	if err := needStore("PurgeIdempotencyKeys", s); err != nil {
		return PurgeReport{}, err
	}
	run := func(ctx context.Context, _ time.Duration, limit int) (int64, error) { return s.PurgeKeys(ctx, limit) }
	count := func(ctx context.Context, _ time.Duration) (int64, error) { return s.PurgeableKeys(ctx) }
	return purge(ctx, "", []purgeKind{{name: "idempotency-keys", run: run, count: count, ageless: true}}, opts)
}

type purgeKind struct {
	name string
	run  func(ctx context.Context, olderThan time.Duration, limit int) (int64, error)
	// count counts what run would delete, for a dry run.
	count func(ctx context.Context, olderThan time.Duration) (int64, error)
	// ageless kinds decide for themselves what is old enough.
	ageless bool
}

func purge(ctx context.Context, table string, kinds []purgeKind, opts PurgeOptions) (PurgeReport, error) {
	rep := PurgeReport{Table: table, OlderThanSeconds: opts.OlderThan.Seconds(), DryRun: opts.DryRun, Results: []PurgeResult{}}
	o, err := opts.withDefaults(!kinds[0].ageless)
	if err != nil {
		return rep, err
	}
	if o.DryRun {
		for _, k := range kinds {
			n, err := k.count(ctx, o.OlderThan)
			if err != nil {
				return rep, fmt.Errorf("purge %s: dry run: %w", k.name, err)
			}
			rep.Results = append(rep.Results, PurgeResult{Kind: k.name, Eligible: n})
		}
		return rep, nil
	}
	for _, k := range kinds {
		r := PurgeResult{Kind: k.name}
		for o.MaxBatches == 0 || r.Statements < o.MaxBatches {
			n, err := k.run(ctx, o.OlderThan, o.Batch)
			if err != nil {
				rep.Results = append(rep.Results, r)
				return rep, fmt.Errorf("purge %s after %s: %w", k.name, Plural(r.Deleted, "row"), err)
			}
			r.Statements++
			r.Deleted += n
			if n < int64(o.Batch) {
				r.Complete = true
			}
			if o.Progress != nil {
				o.Progress(r)
			}
			if r.Complete {
				break
			}
			if o.Pause > 0 {
				t := time.NewTimer(o.Pause)
				select {
				case <-ctx.Done():
					t.Stop()
					rep.Results = append(rep.Results, r)
					return rep, fmt.Errorf("purge %s interrupted after %s: %w", k.name, Plural(r.Deleted, "row"), ctx.Err())
				case <-t.C:
				}
			}
			if err := ctx.Err(); err != nil {
				rep.Results = append(rep.Results, r)
				return rep, fmt.Errorf("purge %s interrupted after %s: %w", k.name, Plural(r.Deleted, "row"), err)
			}
		}
		rep.Results = append(rep.Results, r)
	}
	return rep, nil
}

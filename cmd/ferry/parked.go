package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/internal/open"
)

// parkedFlags are the flags every parked subcommand takes.
type parkedFlags struct {
	brokerURL string
	queue     string
	parking   string
}

func (f *parkedFlags) flags(fl *pflag.FlagSet) {
	fl.StringVar(&f.brokerURL, "broker-url", "", "RabbitMQ URL: amqp://user:pass@host:5672/vhost (amqps:// for TLS; a cluster's nodes comma-separated, the first that answers is used)")
	bindShared(fl, "broker-url", "FERRY_BROKER_URL", "relay.broker_url")
	fl.StringVar(&f.queue, "queue", "", "the consumer's queue: the one the messages were parked from")
	fl.StringVar(&f.parking, "parking-queue", "", "the parking queue (default: --queue with "+ferryamqp.ParkingSuffix+" appended)")
}

// parkingQueue returns the parking queue the flags name.
func (f *parkedFlags) parkingQueue() string {
	if f.parking != "" {
		return f.parking
	}
	return f.queue + ferryamqp.ParkingSuffix
}

// connect checks the flags and connects to RabbitMQ.
func (f *parkedFlags) connect(ctx context.Context, needQueue bool) (*amqp.Connection, error) {
	switch {
	case strings.TrimSpace(f.brokerURL) == "":
		return nil, usageError{errors.New("no broker URL: set --broker-url or FERRY_BROKER_URL (amqp://user:pass@host:5672/vhost)")}
	case !open.IsAMQP(f.brokerURL):
		return nil, usageError{fmt.Errorf("ferry parked works on RabbitMQ (amqp://, amqps://), not %s: "+
			"a NATS consumer parks on a subject of a stream, which keeps its messages; republish them from there",
			open.BrokerSystem(f.brokerURL))}
	case needQueue && f.queue == "":
		return nil, usageError{errors.New("--queue is required: the consumer's queue, where the messages go back to")}
	case f.queue == "" && f.parking == "":
		return nil, usageError{errors.New("name the parking queue: --queue (its parking queue is QUEUE.parking) or --parking-queue")}
	}
	return ferryamqp.Connect(ctx, f.brokerURL, &ferryamqp.ConnectionConfig{Name: "ferry-parked"})
}

func newParked(g *globals) *cobra.Command {
	f := &parkedFlags{}
	cmd := &cobra.Command{
		Use:   "parked",
		Short: "List the messages a RabbitMQ consumer parked, replay them to its queue after a fix, or drop them",
		Long: `A consumer parks a message it cannot handle (its handler returned a poison
error, the message is malformed, or it failed on its last allowed delivery):
a copy with the reason in its headers goes to the parking queue (QUEUE.parking
by default), and only then is the original acked. RabbitMQ puts a message
there too when it crashed its consumer more often than the queue's delivery
limit. Parked messages wait for a person.

  ferry parked list   --queue points           the first messages, and why
  ferry parked replay --queue points --dry-run what would move
  ferry parked replay --queue points           move them back, once the cause is fixed
  ferry parked drop   --queue points --resolved-conflicts --database-url ... --dry-run
                                               what would go: the copies of resolved conflicts
  ferry parked drop   --queue points --id ID   remove a message for good

A replay publishes each parked message again, with a publisher confirm,
straight to --queue (through the default exchange: the other queues bound to
its original routing key had their copy already), keeping its id, body,
properties and headers and adding Ferry-Replay-Count; only once RabbitMQ
confirmed the copy is the parked message acked. A crash in between duplicates
a message, which the consumer's inbox absorbs; none is lost. Fix the cause
first: a message that fails again is parked again. A conflict is not fixed
by a replay (it is the same conflict again): resolve it (ferry conflicts
resolve), then drop its parked copy (ferry parked drop --resolved-conflicts).

Looking at a message (list, --dry-run) takes it and returns it to the parking
queue, which RabbitMQ 3.x and 4.0 to 4.2 count as a delivery.`,
	}
	f.flags(cmd.PersistentFlags())
	cmd.AddCommand(newParkedList(f), newParkedReplay(f), newParkedDrop(g, f))
	return cmd
}

// parkedView is a parked message as the commands print it in JSON.
type parkedView struct {
	ferryamqp.ParkedMessage
	Payload string `json:"payload"`
}

func newParkedList(f *parkedFlags) *cobra.Command {
	var (
		limit   int
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Show the first parked messages, oldest first, without removing them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 10000 {
				return usageError{errors.New("--limit must be within 1..10000")}
			}
			ctx := cmd.Context()
			conn, err := f.connect(ctx, false)
			if err != nil {
				return err
			}
			defer conn.Close()
			list, err := ferryamqp.ListParked(ctx, conn, f.parkingQueue(), limit)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				views := make([]parkedView, len(list.Messages))
				for i, m := range list.Messages {
					views[i] = parkedView{m, string(m.Payload)}
				}
				return writeJSON(out, struct {
					ParkingQueue string       `json:"parking_queue"`
					Depth        int          `json:"depth"`
					Messages     []parkedView `json:"messages"`
				}{f.parkingQueue(), list.Depth, views})
			}
			if list.Depth == 0 {
				fmt.Fprintf(out, "parking queue %s is empty\n", f.parkingQueue())
				return nil
			}
			fmt.Fprintf(out, "parking queue %s: %s, the first %d:\n", f.parkingQueue(), plural(list.Depth, "message"), len(list.Messages))
			printParked(out, list.Messages)
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 10, "most messages to show (at most 10000)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON, with headers and payloads")
	return cmd
}

func printParked(w io.Writer, msgs []ferryamqp.ParkedMessage) {
	rows := make([]string, len(msgs))
	for i, m := range msgs {
		at := "-"
		if !m.ParkedAt.IsZero() {
			at = m.ParkedAt.UTC().Format(time.RFC3339)
		}
		rows[i] = fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%s", orDash(m.MessageID), orDash(m.Type), at, orDash(m.Source),
			orDash(m.RoutingKey), m.Replays, ferryadmin.OneLine(m.Reason, 100))
	}
	table(w, "  ", "MESSAGE\tTYPE\tPARKED\tFROM QUEUE\tROUTING KEY\tREPLAYS\tREASON", rows)
}

func newParkedReplay(f *parkedFlags) *cobra.Command {
	var (
		maxN    int
		batch   int
		dryRun  bool
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Move parked messages back to the consumer's queue (after fixing why they were parked)",
		Long: `Moves up to --max messages from the parking queue back to --queue, each
published with a confirm before its parked copy is acked, in batches of
--batch. A run takes at most the messages the parking queue held when it
began: those parked again while it runs wait for the next run. Messages parked
from another queue (a shared parking queue) are left where they are.
Progress goes to stderr, the totals to stdout. --dry-run moves nothing: it
counts what would move and shows the first messages.

Exit code 5 when there was nothing to replay; 1 when a copy was not
confirmed (the messages not moved stay parked; the totals say how many moved).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if maxN < 1 {
				return usageError{errors.New("--max must be positive")}
			}
			if batch < 1 || batch > 10000 {
				return usageError{errors.New("--batch must be within 1..10000")}
			}
			ctx := cmd.Context()
			conn, err := f.connect(ctx, true)
			if err != nil {
				return err
			}
			defer conn.Close()
			errOut := cmd.ErrOrStderr()
			var last time.Time
			opts := ferryamqp.ReplayOptions{Queue: f.queue, ParkingQueue: f.parking, Max: maxN, Batch: batch, DryRun: dryRun,
				Progress: func(r ferryamqp.ReplayResult) {
					if dryRun || time.Since(last) < time.Second {
						return
					}
					last = time.Now()
					fmt.Fprintf(errOut, "ferry: replay: %d replayed, %d skipped of %d examined (%d parked at the start)\n",
						r.Replayed, r.Skipped, r.Examined, r.Depth)
				}}
			res, runErr := ferryamqp.ReplayParked(ctx, conn, opts)
			// Nothing to replay is said once, on stderr, with exit code 5.
			nothing := runErr == nil && res.Replayed == 0
			out := cmd.OutOrStdout()
			if jsonOut {
				if err := writeJSON(out, res); err != nil {
					return errors.Join(runErr, err)
				}
			} else if !nothing {
				printReplay(out, f, res)
			}
			switch {
			case runErr != nil:
				return runErr
			case nothing && res.Depth == 0:
				return exitError{exitNoMatch, fmt.Errorf("nothing to replay: parking queue %s is empty", f.parkingQueue())}
			case nothing:
				return exitError{exitNoMatch, fmt.Errorf("nothing to replay from %s: %s, none parked from %s",
					f.parkingQueue(), plural(res.Examined, "message")+" examined", f.queue)}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&maxN, "max", 10000, "most messages moved by one run")
	fl.IntVar(&batch, "batch", 100, "messages published before their confirms are awaited")
	fl.BoolVar(&dryRun, "dry-run", false, "count and show what would move, move nothing")
	fl.BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

func printReplay(w io.Writer, f *parkedFlags, r ferryamqp.ReplayResult) {
	from, to := f.parkingQueue(), f.queue
	var extra []string
	if r.Skipped > 0 {
		extra = append(extra, fmt.Sprintf("%d skipped: parked from other queues", r.Skipped))
	}
	if r.Failed > 0 {
		extra = append(extra, fmt.Sprintf("%d failed: still parked", r.Failed))
	}
	tail := ""
	if len(extra) > 0 {
		tail = "; " + strings.Join(extra, "; ")
	}
	if r.DryRun {
		fmt.Fprintf(w, "would replay %s from %s to %s (%d examined of %d parked%s); nothing moved\n",
			plural(r.Replayed, "message"), from, to, r.Examined, r.Depth, tail)
		if len(r.Preview) > 0 {
			fmt.Fprintln(w, "the first:")
			printParked(w, r.Preview)
		}
		return
	}
	fmt.Fprintf(w, "replayed %s from %s to %s (%d examined of %d parked%s)\n",
		plural(r.Replayed, "message"), from, to, r.Examined, r.Depth, tail)
}

// parkedDropFlags select the parked messages ferry parked drop removes.
type parkedDropFlags struct {
	ids            []string
	reasonContains string
	resolved       bool
	consumer       string
	all            bool
	maxN           int
	dryRun         bool
	jsonOut        bool
	tables         inboxTables
}

// describe says which messages the flags select, as the flags given.
func (d *parkedDropFlags) describe() string {
	var parts []string
	if len(d.ids) > 0 {
		ids := d.ids
		if len(ids) > 3 {
			ids = append(ids[:3:3], fmt.Sprintf("… (%d ids)", len(d.ids)))
		}
		parts = append(parts, "--id "+strings.Join(ids, ","))
	}
	if d.reasonContains != "" {
		parts = append(parts, "--reason-contains "+shellQuote(d.reasonContains))
	}
	if d.resolved {
		parts = append(parts, "--resolved-conflicts")
	}
	if d.consumer != "" {
		parts = append(parts, "--consumer "+d.consumer)
	}
	return strings.Join(parts, " ")
}

// conflictRef finds the conflict a parked message's reason names: the
// inbox parks a conflicting delivery with "key K was applied by event E
// with other fields (conflict N)".
var conflictRef = regexp.MustCompile(`\(conflict ([0-9]{1,18})\)`)

func newParkedDrop(g *globals, f *parkedFlags) *cobra.Command {
	d := &parkedDropFlags{}
	cmd := &cobra.Command{
		Use:   "drop",
		Short: "Remove parked messages for good: by id, by reason, or the copies of resolved inbox conflicts",
		Long: `Removes parked messages from the parking queue for good, once a person decided
that their effect must never be applied: the parked delivery of an inbox
conflict that was resolved (replayed, it would be the same conflict again), a
message for a feature that no longer exists. Select them with

  --id ID                   the message ids (repeat, or comma-separate)
  --reason-contains TEXT    the park reason contains TEXT (case-sensitive)
  --resolved-conflicts      the deliveries an inbox parked as a conflict that is
                            RESOLVED now (ferry conflicts resolve), read from the
                            consumer's database (--database-url, --conflict-table;
                            --consumer for one consumer's)
  --all                     every message (required when no other selector is given)

Selectors combine: a message must match each one given. Only messages parked
from --queue are dropped (name the queue alone with --parking-queue to drop
from a shared parking queue whatever their origin). Run with --dry-run first:
it counts what would go and shows the first messages, dropping nothing. A run
looks at most at the messages the queue held when it began, drops at most
--max, and returns every other message to the parking queue, in its order.

A dropped message is acked and gone, with its body: nothing is published,
nothing is applied. Keep what you need first (ferry parked list --json).

Exit code 5 when no message matched; 1 when the run failed part way (the
totals say how many were dropped; the others stay parked).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runParkedDrop(cmd, g, f, d) },
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&d.ids, "id", nil, "message id (repeat, or comma-separate)")
	fl.StringVar(&d.reasonContains, "reason-contains", "", "the park reason contains this text")
	fl.BoolVar(&d.resolved, "resolved-conflicts", false,
		"the parked deliveries of inbox conflicts now RESOLVED, read from the consumer's database (--database-url)")
	fl.StringVar(&d.consumer, "consumer", "", "with --resolved-conflicts: only this consumer's conflicts (points-award)")
	fl.BoolVar(&d.all, "all", false, "drop every message (required when no other selector is given)")
	fl.IntVar(&d.maxN, "max", 0, "most messages dropped by one run (0: every match)")
	fl.BoolVar(&d.dryRun, "dry-run", false, "count and show what would be dropped, drop nothing")
	fl.BoolVar(&d.jsonOut, "json", false, "print JSON")
	d.tables.flags(fl, false)
	return cmd
}

func runParkedDrop(cmd *cobra.Command, g *globals, f *parkedFlags, d *parkedDropFlags) error {
	var ids []string
	for _, id := range d.ids {
		if id = strings.TrimSpace(id); id != "" {
			ids = append(ids, id)
		}
	}
	d.ids = ids
	selected := len(d.ids) > 0 || d.reasonContains != "" || d.resolved
	switch {
	case !selected && !d.all:
		return usageError{errors.New("select messages with --id, --reason-contains or --resolved-conflicts, or pass --all")}
	case selected && d.all:
		return usageError{errors.New("--all drops every message: give it alone, or select with --id, --reason-contains " +
			"or --resolved-conflicts")}
	case d.consumer != "" && !d.resolved:
		return usageError{errors.New("--consumer goes with --resolved-conflicts")}
	case d.resolved && strings.TrimSpace(g.databaseURL) == "":
		return usageError{errors.New("--resolved-conflicts reads the conflicts from the consumer's database: " +
			"set --database-url (or FERRY_DATABASE_URL) to it")}
	case d.maxN < 0:
		return usageError{errors.New("--max must not be negative (0: every match)")}
	}
	ctx := cmd.Context()
	match := parkedMatch(d)
	if d.resolved {
		s, err := d.tables.open(cmd, g)
		if err != nil {
			return err
		}
		defer s.Close()
		match = resolvedConflicts(s, d, match)
	}
	conn, err := f.connect(ctx, false)
	if err != nil {
		return err
	}
	defer conn.Close()
	res, runErr := ferryamqp.DropParked(ctx, conn, ferryamqp.DropOptions{ParkingQueue: f.parkingQueue(), Source: f.queue,
		Match: match, Max: d.maxN, DryRun: d.dryRun})
	nothing := runErr == nil && res.Dropped == 0
	out := cmd.OutOrStdout()
	if d.jsonOut {
		if err := writeJSON(out, res); err != nil {
			return errors.Join(runErr, err)
		}
	} else if !nothing {
		printDrop(out, f, res, d.maxN, runErr != nil)
	}
	switch {
	case runErr != nil:
		return runErr
	case nothing && res.Depth == 0:
		return exitError{exitNoMatch, fmt.Errorf("nothing to drop: parking queue %s is empty", f.parkingQueue())}
	case nothing && d.all:
		return exitError{exitNoMatch, fmt.Errorf("nothing to drop: none of the %s in %s was parked from %s",
			plural(res.Examined, "message"), f.parkingQueue(), f.queue)}
	case nothing:
		return exitError{exitNoMatch, fmt.Errorf("no parked message in %s matches %s: nothing to drop (%d examined)",
			f.parkingQueue(), d.describe(), res.Examined)}
	}
	return nil
}

// parkedMatch selects the messages --id and --reason-contains name.
func parkedMatch(d *parkedDropFlags) func(context.Context, ferryamqp.ParkedMessage) (bool, error) {
	ids := map[string]bool{}
	for _, id := range d.ids {
		ids[id] = true
	}
	return func(_ context.Context, m ferryamqp.ParkedMessage) (bool, error) {
		switch {
		case len(ids) > 0 && !ids[m.MessageID]:
			return false, nil
		case d.reasonContains != "" && !strings.Contains(m.Reason, d.reasonContains):
			return false, nil
		}
		return true, nil
	}
}

// resolvedConflicts narrows match to the parked deliveries of conflicts
// that are RESOLVED in s: the conflict the park reason names, whose key
// the reason names too (so that a conflict id read from another
// consumer's database never matches), of --consumer when given.
func resolvedConflicts(s open.Inbox, d *parkedDropFlags, match func(context.Context, ferryamqp.ParkedMessage) (bool, error),
) func(context.Context, ferryamqp.ParkedMessage) (bool, error) {
	seen := map[int64]*ferryadmin.Conflict{} // nil: no such conflict
	return func(ctx context.Context, m ferryamqp.ParkedMessage) (bool, error) {
		if ok, err := match(ctx, m); !ok || err != nil {
			return false, err
		}
		refs := conflictRef.FindAllStringSubmatch(m.Reason, -1)
		if len(refs) == 0 {
			return false, nil
		}
		id, err := strconv.ParseInt(refs[len(refs)-1][1], 10, 64)
		if err != nil {
			return false, nil
		}
		c, known := seen[id]
		if !known {
			found, err := ferryadmin.GetConflicts(ctx, s, []int64{id})
			if err != nil {
				return false, err
			}
			if len(found.Conflicts) == 1 {
				c = &found.Conflicts[0]
			}
			seen[id] = c
		}
		return c != nil && c.Resolution != nil && strings.Contains(m.Reason, "key "+c.Key+" ") &&
			(d.consumer == "" || c.Consumer == d.consumer), nil
	}
}

func printDrop(w io.Writer, f *parkedFlags, r ferryamqp.DropResult, maxN int, failed bool) {
	kept := ""
	if r.Kept > 0 {
		kept = fmt.Sprintf("; %d kept: not selected", r.Kept)
		if f.queue != "" {
			kept += " or parked from another queue than " + f.queue
		}
	}
	capped := ""
	if maxN > 0 && r.Dropped == maxN && r.Examined < r.Depth {
		capped = fmt.Sprintf("; stopped at --max %d (run again to go on)", maxN)
	}
	if r.DryRun {
		fmt.Fprintf(w, "would drop %s from %s (%d examined of %d parked%s%s); nothing dropped\n",
			plural(r.Dropped, "message"), f.parkingQueue(), r.Examined, r.Depth, kept, capped)
		if len(r.Preview) > 0 {
			fmt.Fprintln(w, "the first:")
			printParked(w, r.Preview)
		}
		return
	}
	stopped := ""
	if failed {
		stopped = "drop stopped by an error: "
	}
	fmt.Fprintf(w, "%sdropped %s from %s for good (%d examined of %d parked%s%s)\n", stopped,
		plural(r.Dropped, "message"), f.parkingQueue(), r.Examined, r.Depth, kept, capped)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	fl.StringVar(&f.brokerURL, "broker-url", "", "RabbitMQ URL: amqp://user:pass@host:5672/vhost (amqps:// for TLS)")
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

func newParked() *cobra.Command {
	f := &parkedFlags{}
	cmd := &cobra.Command{
		Use:   "parked",
		Short: "List the messages a RabbitMQ consumer parked, or replay them to its queue after a fix",
		Long: `A consumer parks a message it cannot handle (its handler returned a poison
error, the message is malformed, or it failed on its last allowed delivery):
a copy with the reason in its headers goes to the parking queue (QUEUE.parking
by default), and only then is the original acked. RabbitMQ puts a message
there too when it crashed its consumer more often than the queue's delivery
limit. Parked messages wait for a person.

  ferry parked list   --queue points           the first messages, and why
  ferry parked replay --queue points --dry-run what would move
  ferry parked replay --queue points           move them back, once the cause is fixed

A replay publishes each parked message again, with a publisher confirm,
straight to --queue (through the default exchange: the other queues bound to
its original routing key had their copy already), keeping its id, body,
properties and headers and adding Ferry-Replay-Count; only once RabbitMQ
confirmed the copy is the parked message acked. A crash in between duplicates
a message, which the consumer's inbox absorbs; none is lost. Fix the cause
first: a message that fails again is parked again.

Looking at a message (list, --dry-run) takes it and returns it to the parking
queue, which RabbitMQ 3.x and 4.0 to 4.2 count as a delivery.`,
	}
	f.flags(cmd.PersistentFlags())
	cmd.AddCommand(newParkedList(f), newParkedReplay(f))
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
			fmt.Fprintf(out, "parking queue %s: %d messages, the first %d:\n", f.parkingQueue(), list.Depth, len(list.Messages))
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
			out := cmd.OutOrStdout()
			if jsonOut {
				if err := writeJSON(out, res); err != nil {
					return errors.Join(runErr, err)
				}
			} else {
				printReplay(out, f, res)
			}
			if runErr != nil {
				return runErr
			}
			if res.Replayed == 0 {
				return exitError{exitNoMatch, fmt.Errorf("nothing to replay from %s", f.parkingQueue())}
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
		fmt.Fprintf(w, "would replay %d messages from %s to %s (%d examined of %d parked%s); nothing moved\n",
			r.Replayed, from, to, r.Examined, r.Depth, tail)
		if len(r.Preview) > 0 {
			fmt.Fprintln(w, "the first:")
			printParked(w, r.Preview)
		}
		return
	}
	fmt.Fprintf(w, "replayed %d messages from %s to %s (%d examined of %d parked%s)\n",
		r.Replayed, from, to, r.Examined, r.Depth, tail)
}

package ferryamqp

import (
	"context"
	"fmt"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry/ferrytype"
)

// DropOptions configures DropParked. Zero fields take the default named in
// their comment.
type DropOptions struct {
	// ParkingQueue is the queue the messages are dropped from. Required.
	ParkingQueue string
	// Source, when set, keeps the messages parked from any other queue
	// (a parking queue that several queues share): only those parked from
	// Source are dropped. Default "": wherever they were parked from.
	Source string
	// Match says which messages to drop. Required: a run that drops every
	// message says so with a Match that returns true. An error ends the
	// run; the messages not dropped stay parked.
	Match func(ctx context.Context, m ParkedMessage) (bool, error)
	// Max is the most messages one run drops (with DryRun, counts).
	// Default 0: every match among the messages the queue held when the
	// run began.
	Max int
	// DryRun drops nothing: the messages are taken, counted and returned
	// to the parking queue (basic.nack with requeue) at the end of the run.
	DryRun bool
	// Preview is how many messages DropResult.Preview holds. Default 10;
	// negative: none.
	Preview int
	// Progress, when set, is called after every 100 messages examined with
	// the totals so far (Preview not filled in).
	Progress func(DropResult)
	// Logger receives a line per 100 messages at debug level. Default:
	// discarded.
	Logger *slog.Logger
}

func (o DropOptions) withDefaults() (DropOptions, error) {
	if o.Preview == 0 {
		o.Preview = 10
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.ParkingQueue == "" || len(o.ParkingQueue) > 255:
		return o, fmt.Errorf("%w: DropOptions.ParkingQueue must be 1..255 bytes", ferrytype.ErrInvalidConfig)
	case len(o.Source) > 255:
		return o, fmt.Errorf("%w: DropOptions.Source is longer than 255 bytes", ferrytype.ErrInvalidConfig)
	case o.Match == nil:
		return o, fmt.Errorf("%w: DropOptions.Match is nil: say which messages to drop", ferrytype.ErrInvalidConfig)
	case o.Max < 0:
		return o, fmt.Errorf("%w: DropOptions.Max %d is negative", ferrytype.ErrInvalidConfig, o.Max)
	}
	return o, nil
}

// DropResult is what a DropParked run did. Its counts are exact: a
// message is counted once, by what happened to it.
type DropResult struct {
	// DryRun is set when nothing was dropped.
	DryRun bool `json:"dry_run"`
	// Depth is the number of messages ready in the parking queue when the
	// run began. A run looks at most at this many.
	Depth int `json:"depth"`
	// Examined counts the messages taken from the parking queue.
	Examined int `json:"examined"`
	// Dropped counts the messages acked, gone for good. With DryRun, those
	// that would be.
	Dropped int `json:"dropped"`
	// Kept counts the messages examined and left parked: not matched, or
	// parked from another queue than Source.
	Kept int `json:"kept"`
	// Preview holds the first messages dropped (with DryRun, that would
	// be).
	Preview []ParkedMessage `json:"preview,omitempty"`
}

// DropParked removes parked messages for good: those of opts.ParkingQueue
// that opts.Match selects, once a person decided that their effect must
// never be applied (the parked copy of an inbox conflict that was
// resolved, a message for a feature that no longer exists). It uses conn,
// a connection the caller opened and keeps owning.
//
// Each message is taken with basic.get and judged; one that matches is
// acked, which deletes it; the others are held and returned to the
// parking queue at the end of the run (basic.nack with requeue), in their
// order. A run looks at most at as many messages as the queue held when it
// began, and drops at most opts.Max. With opts.DryRun nothing is dropped:
// the run counts and previews, and every message looked at is returned,
// which counts as a delivery there (see ListParked). A run that ends early
// (an error, ctx) leaves what it held parked (it comes back when the
// channel closes); the result counts what was done.
//
// Nothing is published: a dropped message is gone, with its body. Look
// first (ListParked, or DryRun with a Preview), and keep what you need.
func DropParked(ctx context.Context, conn *amqp.Connection, opts DropOptions) (DropResult, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return DropResult{}, err
	}
	if err := checkBorrowed(conn); err != nil {
		return DropResult{}, fmt.Errorf("ferryamqp.DropParked: %w", err)
	}
	res := DropResult{DryRun: o.DryRun}
	g, err := openGetter(ctx, conn)
	if err != nil {
		return res, err
	}
	defer g.close(ctx)
	if res.Depth, err = g.depth(ctx, o.ParkingQueue); err != nil {
		return res, err
	}
	report := func() {
		o.Logger.Debug("drop: progress", "parking_queue", o.ParkingQueue, "examined", res.Examined,
			"dropped", res.Dropped, "kept", res.Kept)
		if o.Progress != nil {
			p := res
			p.Preview = nil
			o.Progress(p)
		}
	}
	for res.Examined < res.Depth && (o.Max == 0 || res.Dropped < o.Max) {
		d, ok, err := g.get(ctx, o.ParkingQueue)
		if err != nil {
			return res, err // what it held comes back when the channel closes
		}
		if !ok {
			break
		}
		res.Examined++
		pm := parkedMessage(&d)
		drop := o.Source == "" || pm.Source == o.Source
		if drop {
			if drop, err = o.Match(ctx, pm); err != nil {
				return res, fmt.Errorf("judge parked message %s (it stays parked): %w", pm.MessageID, err)
			}
		}
		switch {
		case !drop:
			res.Kept++ // held until the end of the run, then returned
		case o.DryRun:
			res.Dropped++
			res.Preview = appendPreview(res.Preview, pm, o.Preview)
		default:
			tag := d.DeliveryTag
			if err := g.settle(func() error { return g.ch.Ack(tag, false) }); err != nil {
				// Not acked: it comes back when the channel closes.
				return res, fmt.Errorf("drop parked message %s (it stays parked): %w", pm.MessageID, err)
			}
			res.Dropped++
			res.Preview = appendPreview(res.Preview, pm, o.Preview)
		}
		if res.Examined%100 == 0 {
			report()
		}
	}
	report()
	want := res.Depth
	if !o.DryRun {
		want -= res.Dropped // acked: gone from the parking queue
	}
	return res, g.returnHeld(ctx, o.ParkingQueue, want)
}

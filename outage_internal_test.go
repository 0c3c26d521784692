package ferry

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrydev/ferry/ferrystore/ferrymem"
	"github.com/ferrydev/ferry/ferrytype"
)

// flappy is a publisher whose connectivity a test sets.
type flappy struct{ down atomic.Pointer[error] }

func (f *flappy) Publish(_ context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	return make([]ferrytype.PublishResult, len(msgs))
}
func (f *flappy) Close() error    { return nil }
func (f *flappy) Connected() bool { return f.Disconnected() == nil }
func (f *flappy) Disconnected() error {
	if err := f.down.Load(); err != nil {
		return *err
	}
	return nil
}

// A batch published during an outage whose results come back not sent
// after the connection is back ends no second outage: it is the first
// one's tail. A batch published since then starts one.
func TestOutageTailIsNoNewOutage(t *testing.T) {
	ctx := context.Background()
	store, err := ferrymem.New(ferrymem.NewDB(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := &flappy{}
	var outages atomic.Int64
	o := newOutage(pub, store, 10*time.Millisecond, slog.New(slog.DiscardHandler), &outages)

	lost := errors.New("connection lost")
	pub.down.Store(&lost)
	if !o.down(ctx) || outages.Load() != 1 {
		t.Fatalf("the connection is down: down %v, outages %d", o.down(ctx), outages.Load())
	}
	inFlight := time.Now() // a lane's publish, begun during the outage
	pub.down.Store(nil)
	if o.down(ctx) {
		t.Fatal("the connection is back: claim again")
	}
	notSent := batchOutcome{notSent: 20, notSentErr: ferrytype.ErrNotSent, published: inFlight, retryIn: -1}
	o.observe(ctx, notSent)
	if got := outages.Load(); got != 1 {
		t.Fatalf("the first outage's tail started outage %d", got)
	}
	if o.down(ctx) {
		t.Fatal("the tail holds claims back")
	}

	notSent.published = time.Now()
	o.observe(ctx, notSent)
	if got := outages.Load(); got != 2 {
		t.Fatalf("a batch published after the outage came back not sent: outages %d, want 2", got)
	}
}

// An outage seen in results (the publisher still says it is connected)
// is not ended by the answer to a publish begun before it: only one begun
// since then says the broker is reachable again.
func TestOutageEndsOnAnAnswerToALaterPublish(t *testing.T) {
	ctx := context.Background()
	store, err := ferrymem.New(ferrymem.NewDB(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	var outages atomic.Int64
	o := newOutage(&flappy{}, store, 10*time.Millisecond, slog.New(slog.DiscardHandler), &outages)
	earlier := time.Now()
	o.observe(ctx, batchOutcome{notSent: 5, notSentErr: ferrytype.ErrNotSent, published: time.Now(), retryIn: -1})
	if up, _ := o.state(); up || outages.Load() != 1 {
		t.Fatalf("not-sent results start an outage: up %v, outages %d", up, outages.Load())
	}
	o.observe(ctx, batchOutcome{answered: true, published: earlier, retryIn: -1})
	if up, _ := o.state(); up {
		t.Fatal("the answer to a publish from before the outage ended it")
	}
	o.observe(ctx, batchOutcome{answered: true, published: time.Now(), retryIn: -1})
	if up, _ := o.state(); !up || outages.Load() != 1 {
		t.Fatalf("an answer to a later publish ends the outage: up %v, outages %d", up, outages.Load())
	}
}

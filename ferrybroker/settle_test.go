package ferrybroker_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrytype"
)

// fakeAck records what a Settler asked of it and answers with the errors
// it was given.
type fakeAck struct {
	ackErr, retryErr, parkErr error
	calls                     []string
	delay                     time.Duration
	reason                    error
}

func (a *fakeAck) Ack() error { a.calls = append(a.calls, "ack"); return a.ackErr }
func (a *fakeAck) Retry(d time.Duration, _ error) error {
	a.calls = append(a.calls, "retry")
	a.delay = d
	return a.retryErr
}
func (a *fakeAck) Leave()   { a.calls = append(a.calls, "leave") }
func (a *fakeAck) Abandon() { a.calls = append(a.calls, "abandon") }
func (a *fakeAck) Park(reason error) error {
	a.calls = append(a.calls, "park")
	a.reason = reason
	return a.parkErr
}

// The settle policy every broker's consumer shares, case by case: what
// the acknowledger is asked to do, and what is recorded.
func TestSettlerDecides(t *testing.T) {
	transient := errors.New("points service down")
	poison := ferrytype.Poison(errors.New("unknown currency"))
	unmigrated := ferrytype.Classed(errors.New("no table"), ferrytype.ErrUndefinedTable)
	malformed := ferrybroker.CheckPayload("", []byte("not json"))
	refused := errors.New("channel closed")
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	crash := ferryfault.With(context.Background(), func(_ context.Context, point string) error {
		if point == ferryfault.ConsumerAfterHandle {
			return errors.New("crash")
		}
		return nil
	})
	for _, c := range []struct {
		name       string
		ctx        context.Context
		step       ferrybroker.Step
		err        error
		count      int
		ack        fakeAck
		calls      string
		action     ferrybroker.Action
		parkFailed int64
		log        string
	}{
		{name: "Stopping", step: ferrybroker.StepStopping, calls: "leave", action: ferrybroker.ActionLeft},
		{name: "Malformed", step: ferrybroker.StepMalformed, err: malformed, calls: "park", action: ferrybroker.ActionParked, log: "message parked"},
		{name: "Committed", step: ferrybroker.StepHandled, calls: "ack", action: ferrybroker.ActionAcked},
		{name: "CommittedAckFailed", step: ferrybroker.StepHandled, ack: fakeAck{ackErr: refused}, calls: "ack",
			action: ferrybroker.ActionLeft, log: "ack after commit failed"},
		{name: "CommittedAckLater", step: ferrybroker.StepHandled, ack: fakeAck{ackErr: ferrybroker.ErrSettlesItself}, calls: "ack"},
		{name: "FaultAfterHandle", ctx: crash, step: ferrybroker.StepHandled, calls: "abandon", action: ferrybroker.ActionLeft,
			log: "fault after handle"},
		{name: "CommittedAfterTheContextEnded", ctx: ended, step: ferrybroker.StepHandled, calls: "ack", action: ferrybroker.ActionAcked},
		{name: "CutOff", ctx: ended, step: ferrybroker.StepHandled, err: transient, count: 10, calls: "leave", action: ferrybroker.ActionLeft},
		{name: "Poison", step: ferrybroker.StepHandled, err: poison, count: 1, calls: "park", action: ferrybroker.ActionParked},
		{name: "Transient", step: ferrybroker.StepHandled, err: transient, count: 1, calls: "retry", action: ferrybroker.ActionRetried},
		{name: "TransientRetryFailed", step: ferrybroker.StepHandled, err: transient, count: 1, ack: fakeAck{retryErr: refused},
			calls: "retry", action: ferrybroker.ActionLeft},
		{name: "TransientRetryLater", step: ferrybroker.StepHandled, err: transient, count: 1,
			ack: fakeAck{retryErr: ferrybroker.ErrSettlesItself}, calls: "retry"},
		{name: "LastDelivery", step: ferrybroker.StepHandled, err: transient, count: 3, calls: "park", action: ferrybroker.ActionParked},
		{name: "UnmigratedNeverParked", step: ferrybroker.StepHandled, err: unmigrated, count: 1000, calls: "retry",
			action: ferrybroker.ActionRetried},
		{name: "ParkFailedIsRetried", step: ferrybroker.StepHandled, err: poison, count: 1, ack: fakeAck{parkErr: refused},
			calls: "park retry", action: ferrybroker.ActionRetried, parkFailed: 1, log: "park failed"},
		{name: "ParkCutOff", ctx: ended, step: ferrybroker.StepMalformed, err: malformed, ack: fakeAck{parkErr: refused},
			calls: "park leave", action: ferrybroker.ActionLeft},
		{name: "ParkSettledLater", step: ferrybroker.StepHandled, err: poison, count: 1,
			ack: fakeAck{parkErr: ferrybroker.ErrSettlesItself}, calls: "park", log: "message parked"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []ferrybroker.Settlement
			var logs bytes.Buffer
			o := ferrybroker.ConsumerOptions{Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: 3},
				Hooks: []ferrybroker.Hook{ferrybroker.SettledFunc(func(_ string, _ *ferrybroker.Delivery, s ferrybroker.Settlement) {
					got = append(got, s)
				})}}.WithDefaults("q")
			s := ferrybroker.NewSettler(o, slog.New(slog.NewTextHandler(&logs, nil)), slog.String("park_topic", "parked"))
			d := &ferrybroker.Delivery{MessageID: "evt-1", DeliveryCount: c.count}
			s.Observer.Delivered(d)
			ctx := c.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			a := c.ack
			s.Settle(ctx, d, &a, c.step, c.err)
			if strings.Join(a.calls, " ") != c.calls {
				t.Fatalf("asked %q, want %q", a.calls, c.calls)
			}
			st := s.Observer.Stats()
			if c.action == 0 {
				if len(got) != 0 || st.InFlight != 1 {
					t.Fatalf("settled by the Settler although the acknowledger settles it: %v", got)
				}
				return
			}
			if len(got) != 1 || got[0].Action != c.action {
				t.Fatalf("settled %v, want one %s", got, c.action)
			}
			if st.ParkFailed != c.parkFailed || st.InFlight != 0 {
				t.Fatalf("stats %+v", st)
			}
			if c.log != "" && !strings.Contains(logs.String(), c.log) {
				t.Fatalf("log %q lacks %q", logs.String(), c.log)
			}
			if strings.Contains(c.calls, "park") && strings.Contains(logs.String(), "message parked") &&
				!strings.Contains(logs.String(), "park_topic=parked") {
				t.Fatalf("log %q does not say where it parked", logs.String())
			}
			if c.name == "LastDelivery" && !strings.Contains(a.reason.Error(), "failed on delivery 3 of at most 3") {
				t.Fatalf("park reason %v", a.reason)
			}
			if c.name == "Transient" && (a.delay < 160*time.Millisecond || a.delay > 240*time.Millisecond) {
				t.Fatalf("first retry delay %s, want 200ms ±20%%", a.delay)
			}
		})
	}
}

// The park headers every consumer sets, in their order; a long reason is
// cut.
func TestParkHeaders(t *testing.T) {
	d := &ferrybroker.Delivery{DeliveryCount: 3}
	h := ferrybroker.ParkHeaders(errors.New(strings.Repeat("x", 5000)), d, "orders.paid", "points")
	keys := make([]string, len(h))
	for i, kv := range h {
		keys[i] = kv[0]
	}
	want := []string{ferrybroker.HeaderParkReason, ferrybroker.HeaderParkedAt, ferrybroker.HeaderParkRoute,
		ferrybroker.HeaderParkSource, ferrybroker.HeaderParkDeliveryCount}
	if strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Fatalf("keys %v, want %v", keys, want)
	}
	if len(h[0][1]) != 4096+3 || !strings.HasSuffix(h[0][1], "...") {
		t.Fatalf("reason not cut: %d bytes", len(h[0][1]))
	}
	if _, err := time.Parse(time.RFC3339Nano, h[1][1]); err != nil {
		t.Fatal(err)
	}
	if h[2][1] != "orders.paid" || h[3][1] != "points" || h[4][1] != "3" {
		t.Fatalf("headers %v", h[2:])
	}
}

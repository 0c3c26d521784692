// Package ferrybrokertest holds the conformance suites every broker
// adapter runs against its real broker: Exercise for publishers (a broker's
// test file builds a Harness) and ExerciseConsumer for consumers (a
// ConsumerHarness: publish a raw message, build a consumer from a handler
// and ConsumerOptions, read what was parked, count what is not settled).
package ferrybrokertest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
)

// Received is a message read back from the broker.
type Received struct {
	ID      string
	Route   string
	Payload []byte
	Headers map[string]string
}

// Setup is one publisher on a fresh piece of broker topology.
type Setup struct {
	Publisher ferrybroker.Publisher
	// Route returns a routable destination: published messages reach the
	// queue or stream that Receive reads.
	Route string
	// Unroutable is a destination that routes nowhere.
	Unroutable string
	// NoUnroutable, set instead of Unroutable, says why the publisher
	// cannot report an unroutable message (Watermill's publishers return
	// one error and nothing else); the subtest on it is skipped with
	// this reason.
	NoUnroutable string
	// Receive returns the messages that reached Route, waiting up to d
	// for at least want of them.
	Receive func(t *testing.T, want int, d time.Duration) []Received
	// Break severs the publisher's connection to the broker.
	Break func(t *testing.T)
	// NoBreak, set instead of Break, says why the connection cannot be
	// severed in this run; the subtests on it are skipped with this
	// reason.
	NoBreak string
	// Cut makes the broker unreachable for the publisher (its connection
	// drops, reconnects fail) until Restore. Set by Harness.NewDialed.
	Cut func(t *testing.T)
	// Restore makes the broker reachable again after Cut.
	Restore func(t *testing.T)
	// DetectsDuplicates is true for brokers that drop a republished
	// message id and say so (JetStream).
	DetectsDuplicates bool
}

// Harness adapts one broker to the suite.
type Harness struct {
	// New returns a publisher on fresh topology, torn down when t ends.
	New func(t *testing.T) Setup
	// NewDialed returns a publisher that dialled the broker itself and
	// reconnects after a loss, on fresh topology, with Cut and Restore set.
	// It must implement ferrybroker.Connectivity, and retry its connection
	// often enough to be back within seconds of Restore.
	NewDialed func(t *testing.T) Setup
	// NoConnectivity, set instead of NewDialed, says why the publisher
	// cannot tell whether the broker is reachable; the outage subtest is
	// skipped with this reason.
	NoConnectivity string
}

func msg(i int, route string) ferrytype.Message {
	return ferrytype.Message{
		ID:            fmt.Sprintf("evt-%d-%d", time.Now().UnixNano(), i),
		AggregateType: "order",
		AggregateID:   fmt.Sprint(i % 7),
		Sequence:      int64(i + 1),
		Type:          "OrderPaid",
		Payload:       json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
		Headers:       map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		Destination:   route,
		Attempt:       1,
		CreatedAt:     time.Now(),
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Exercise runs the conformance suite.
func Exercise(t *testing.T, h Harness) {
	t.Run("ConfirmsEveryMessage", func(t *testing.T) {
		s := h.New(t)
		ctx := ctxFor(t)
		want := map[string]ferrytype.Message{}
		for b := 0; b < 5; b++ {
			batch := make([]ferrytype.Message, 100)
			for i := range batch {
				batch[i] = msg(b*100+i, s.Route)
				want[batch[i].ID] = batch[i]
			}
			for i, r := range s.Publisher.Publish(ctx, batch) {
				require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome, "message %d: %v", i, r.Err)
				require.False(t, r.Duplicate)
			}
		}
		got := s.Receive(t, len(want), 30*time.Second)
		require.Len(t, got, len(want))
		for _, g := range got {
			m, ok := want[g.ID]
			require.True(t, ok, "unexpected message id %q", g.ID)
			delete(want, g.ID)
			require.JSONEq(t, string(m.Payload), string(g.Payload))
			require.Equal(t, m.Headers["traceparent"], g.Headers["traceparent"])
			require.Equal(t, m.ID, g.Headers[ferrybroker.HeaderEventID])
			require.Equal(t, "OrderPaid", g.Headers[ferrybroker.HeaderEventType])
			require.Equal(t, m.AggregateID, g.Headers[ferrybroker.HeaderAggregateID])
			require.Equal(t, fmt.Sprint(m.Sequence), g.Headers[ferrybroker.HeaderSequence])
		}
		require.Empty(t, want)
	})

	t.Run("UnroutableIsNeverConfirmed", func(t *testing.T) {
		s := h.New(t)
		if s.Unroutable == "" && s.NoUnroutable != "" {
			t.Skip(s.NoUnroutable)
		}
		ctx := ctxFor(t)
		batch := make([]ferrytype.Message, 40)
		for i := range batch {
			route := s.Route
			if i%3 == 0 {
				route = s.Unroutable
			}
			batch[i] = msg(i, route)
		}
		res := s.Publisher.Publish(ctx, batch)
		require.Len(t, res, len(batch))
		routed := 0
		for i, r := range res {
			if batch[i].Destination == s.Unroutable {
				require.Equal(t, ferrytype.OutcomeReturned, r.Outcome, "message %d to %q", i, s.Unroutable)
				require.Error(t, r.Err)
				continue
			}
			require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome, "message %d: %v", i, r.Err)
			routed++
		}
		require.Len(t, s.Receive(t, routed, 30*time.Second), routed)
	})

	t.Run("EndedContextIsUnknown", func(t *testing.T) {
		s := h.New(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res := s.Publisher.Publish(ctx, []ferrytype.Message{msg(0, s.Route), msg(1, s.Route)})
		for _, r := range res {
			require.Equal(t, ferrytype.OutcomeUnknown, r.Outcome)
			require.Error(t, r.Err)
		}
	})

	t.Run("RepublishKeepsTheID", func(t *testing.T) {
		s := h.New(t)
		ctx := ctxFor(t)
		m := msg(0, s.Route)
		for i := 0; i < 2; i++ {
			r := s.Publisher.Publish(ctx, []ferrytype.Message{m})[0]
			require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome, "%v", r.Err)
			if s.DetectsDuplicates {
				require.Equal(t, i == 1, r.Duplicate, "publish %d", i+1)
			}
		}
		want := 2
		if s.DetectsDuplicates {
			want = 1
		}
		got := s.Receive(t, want, 30*time.Second)
		require.Len(t, got, want)
		for _, g := range got {
			require.Equal(t, m.ID, g.ID)
		}
	})

	t.Run("BrokenConnectionIsUnknownNeverConfirmed", func(t *testing.T) {
		s := h.New(t)
		if s.Break == nil && s.NoBreak != "" {
			t.Skip(s.NoBreak)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Break(t)
		res := s.Publisher.Publish(ctx, []ferrytype.Message{msg(0, s.Route), msg(1, s.Route)})
		for _, r := range res {
			require.NotEqual(t, ferrytype.OutcomeConfirmed, r.Outcome)
			require.Equal(t, ferrytype.OutcomeUnknown, r.Outcome, "a publish that may have left is unknown: %v", r.Err)
		}
	})

	t.Run("BreakDuringPublishConfirmsOnlyStoredMessages", func(t *testing.T) {
		s := h.New(t)
		if s.Break == nil && s.NoBreak != "" {
			t.Skip(s.NoBreak)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		batch := make([]ferrytype.Message, 2000)
		for i := range batch {
			batch[i] = msg(i, s.Route)
		}
		done := make(chan []ferrytype.PublishResult, 1)
		go func() { done <- s.Publisher.Publish(ctx, batch) }()
		// Break races the publish: whatever the interleaving, a message
		// is either confirmed, and then stored, or unknown.
		s.Break(t)
		res := <-done
		require.Len(t, res, len(batch))
		confirmed := map[string]bool{}
		for i, r := range res {
			switch r.Outcome {
			case ferrytype.OutcomeConfirmed:
				confirmed[batch[i].ID] = true
			case ferrytype.OutcomeUnknown:
				require.Error(t, r.Err)
			default:
				t.Fatalf("message %d: %s (%v): a broken connection is unknown", i, r.Outcome, r.Err)
			}
		}
		if len(confirmed) == 0 {
			return
		}
		got := map[string]bool{}
		for _, g := range s.Receive(t, len(confirmed), 30*time.Second) {
			got[g.ID] = true
		}
		for id := range confirmed {
			require.True(t, got[id], "confirmed message %s is not stored", id)
		}
	})

	t.Run("BrokerOutageIsNotSentAndDisconnected", func(t *testing.T) {
		if h.NewDialed == nil && h.NoConnectivity != "" {
			t.Skip(h.NoConnectivity)
		}
		require.NotNil(t, h.NewDialed, "the harness has no NewDialed")
		s := h.NewDialed(t)
		conn, ok := s.Publisher.(ferrybroker.Connectivity)
		require.True(t, ok, "%T does not implement ferrybroker.Connectivity", s.Publisher)
		ctx := ctxFor(t)
		require.True(t, conn.Connected())
		require.NoError(t, conn.Disconnected())
		require.Equal(t, ferrytype.OutcomeConfirmed, s.Publisher.Publish(ctx, []ferrytype.Message{msg(0, s.Route)})[0].Outcome)

		s.Cut(t)
		waitFor(t, 30*time.Second, func() bool { return !conn.Connected() },
			func() string { return "Connected stays true while the broker is cut off" })
		require.Error(t, conn.Disconnected())
		for round := 0; round < 3; round++ {
			batch := []ferrytype.Message{msg(10*round+1, s.Route), msg(10*round+2, s.Route), msg(10*round+3, s.Unroutable)}
			pubCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			res := s.Publisher.Publish(pubCtx, batch)
			cancel()
			require.Len(t, res, len(batch))
			for i, r := range res {
				require.Equal(t, ferrytype.OutcomeUnknown, r.Outcome, "round %d message %d: %v", round, i, r.Err)
				require.ErrorIs(t, r.Err, ferrytype.ErrNotSent, "round %d message %d: nothing can have left", round, i)
				require.True(t, r.NotSent())
			}
		}

		s.Restore(t)
		waitFor(t, 60*time.Second, conn.Connected,
			func() string {
				return fmt.Sprintf("Connected stays false after the broker is back: %v", conn.Disconnected())
			})
		require.NoError(t, conn.Disconnected())
		last := msg(99, s.Route)
		r := s.Publisher.Publish(ctx, []ferrytype.Message{last})[0]
		require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome, "after the outage: %v", r.Err)
		got := s.Receive(t, 2, 30*time.Second)
		require.Len(t, got, 2, "only the messages published while connected reach the broker")
		require.Equal(t, last.ID, got[1].ID)
	})

	t.Run("ConcurrentPublishers", func(t *testing.T) {
		s := h.New(t)
		ctx := ctxFor(t)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for b := 0; b < 5; b++ {
					batch := make([]ferrytype.Message, 50)
					for i := range batch {
						batch[i] = msg(g*1000+b*50+i, s.Route)
					}
					for _, r := range s.Publisher.Publish(ctx, batch) {
						if r.Outcome != ferrytype.OutcomeConfirmed {
							errs <- fmt.Errorf("outcome %s: %v", r.Outcome, r.Err)
							return
						}
					}
				}
			}(g)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, s.Receive(t, 1000, 30*time.Second), 1000)
	})
}

package ferrytest_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrybrokertest"
	"github.com/ferrydev/ferry/ferrytest"
	"github.com/ferrydev/ferry/ferrytype"
)

// setup returns a broker that takes every route but "nowhere", as the
// conformance suite's Setup.
func setup(t *testing.T) ferrybrokertest.Setup {
	b := ferrytest.NewBroker(&ferrytest.BrokerConfig{Routes: func(r string) bool { return r != "nowhere" }})
	t.Cleanup(func() { _ = b.Close() })
	return ferrybrokertest.Setup{
		Publisher:  b,
		Route:      "orders",
		Unroutable: "nowhere",
		Receive: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			msgs, err := b.Wait(ctx, "orders", want)
			require.NoError(t, err)
			out := make([]ferrybrokertest.Received, len(msgs))
			for i, m := range msgs {
				h := map[string]string{}
				for k, v := range m.Headers {
					h[k] = v
				}
				for _, kv := range ferrybroker.MetadataHeaders(&m.Message) {
					h[kv[0]] = kv[1]
				}
				out[i] = ferrybrokertest.Received{ID: m.ID, Route: m.Route, Payload: m.Payload, Headers: h}
			}
			return out
		},
		// A severed connection loses what is written to it.
		Break: func(*testing.T) {
			b.SetFault(func(ferrytype.Message) ferrytest.Fault { return ferrytest.FaultLoseMessage })
		},
		Cut:               func(*testing.T) { b.Disconnect(nil) },
		Restore:           func(*testing.T) { b.Reconnect() },
		DetectsDuplicates: true,
	}
}

func TestConformance(t *testing.T) {
	ferrybrokertest.Exercise(t, ferrybrokertest.Harness{New: setup, NewDialed: setup})
}

func msg(id, dest string) ferrytype.Message {
	return ferrytype.Message{ID: id, Type: "OrderPaid", Destination: dest, Payload: json.RawMessage(`{}`)}
}

func TestBroker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("DuplicateWindowEndsByTheClock", func(t *testing.T) {
		now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		var mu sync.Mutex
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		b := ferrytest.NewBroker(&ferrytest.BrokerConfig{DuplicateWindow: time.Minute, Clock: clock})
		publish := func() ferrytype.PublishResult { return b.Publish(ctx, []ferrytype.Message{msg("e1", "a")})[0] }
		require.False(t, publish().Duplicate)
		require.True(t, publish().Duplicate, "within the window")
		mu.Lock()
		now = now.Add(time.Minute)
		mu.Unlock()
		r := publish()
		require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome)
		require.False(t, r.Duplicate, "past the window the id is stored again")
		require.Len(t, b.Messages("a"), 2)
		require.Equal(t, now, b.Messages("a")[1].Stored)
	})

	t.Run("NoWindowStoresEveryPublish", func(t *testing.T) {
		b := ferrytest.NewBroker(&ferrytest.BrokerConfig{DuplicateWindow: -1})
		for range 3 {
			r := b.Publish(ctx, []ferrytype.Message{msg("e1", "a")})[0]
			require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome)
			require.False(t, r.Duplicate)
		}
		require.Len(t, b.Messages(""), 3)
	})

	t.Run("FaultsDecideOutcomeAndStorage", func(t *testing.T) {
		b := ferrytest.NewBroker(nil)
		faults := map[string]ferrytest.Fault{
			"none": ferrytest.FaultNone, "lose-confirm": ferrytest.FaultLoseConfirm, "lose-message": ferrytest.FaultLoseMessage,
			"not-sent": ferrytest.FaultNotSent, "reject": ferrytest.FaultReject, "return": ferrytest.FaultReturn,
		}
		b.SetFault(func(m ferrytype.Message) ferrytest.Fault { return faults[m.ID] })
		ids := []string{"none", "lose-confirm", "lose-message", "not-sent", "reject", "return"}
		var batch []ferrytype.Message
		for _, id := range ids {
			batch = append(batch, msg(id, "a"))
		}
		res := b.Publish(ctx, batch)
		want := []ferrytype.Outcome{ferrytype.OutcomeConfirmed, ferrytype.OutcomeUnknown, ferrytype.OutcomeUnknown,
			ferrytype.OutcomeUnknown, ferrytype.OutcomeRejected, ferrytype.OutcomeReturned}
		for i, r := range res {
			require.Equal(t, want[i], r.Outcome, ids[i])
			if i > 0 {
				require.ErrorIs(t, r.Err, ferrytest.ErrInjected, ids[i])
			}
			require.Equal(t, ids[i] == "not-sent", r.NotSent(), ids[i])
		}
		var stored []string
		for _, m := range b.Messages("a") {
			stored = append(stored, m.ID)
		}
		require.Equal(t, []string{"none", "lose-confirm"}, stored, "a lost confirm is stored; the others are not")

		b.SetFault(nil)
		r := b.Publish(ctx, []ferrytype.Message{msg("lose-confirm", "a")})[0]
		require.True(t, r.Duplicate, "the message whose confirm was lost is a duplicate when published again")
	})

	t.Run("DisconnectIsNotSentUntilReconnect", func(t *testing.T) {
		b := ferrytest.NewBroker(nil)
		cause := errors.New("network cut")
		b.Disconnect(cause)
		require.False(t, b.Connected())
		require.ErrorIs(t, b.Disconnected(), cause)
		require.ErrorIs(t, b.Check(ctx), cause)
		r := b.Publish(ctx, []ferrytype.Message{msg("e1", "a")})[0]
		require.True(t, r.NotSent())
		require.ErrorIs(t, r.Err, cause)
		b.Reconnect()
		require.True(t, b.Connected())
		require.NoError(t, b.Check(ctx))
		require.Equal(t, ferrytype.OutcomeConfirmed, b.Publish(ctx, []ferrytype.Message{msg("e1", "a")})[0].Outcome)
		require.Len(t, b.Messages("a"), 1)

		require.NoError(t, b.Close())
		require.NoError(t, b.Close(), "closing twice is safe")
		require.ErrorIs(t, b.Disconnected(), ferrytype.ErrClosed)
		require.True(t, b.Publish(ctx, []ferrytype.Message{msg("e2", "a")})[0].NotSent())
		require.Len(t, b.Messages("a"), 1, "what was stored stays readable")
	})

	t.Run("WaitReturnsOnceEnoughAreStored", func(t *testing.T) {
		b := ferrytest.NewBroker(nil)
		got := make(chan []ferrytest.Message, 1)
		go func() {
			msgs, err := b.Wait(ctx, "b", 2)
			if err != nil {
				panic(err)
			}
			got <- msgs
		}()
		b.Publish(ctx, []ferrytype.Message{msg("e1", "a"), msg("e2", "b")})
		b.Publish(ctx, []ferrytype.Message{msg("e3", "b")})
		msgs := <-got
		require.Len(t, msgs, 2)
		require.Equal(t, "e2", msgs[0].ID)
		require.Equal(t, "e3", msgs[1].ID)

		short, cancel := context.WithCancel(ctx)
		cancel()
		msgs, err := b.Wait(short, "", 10)
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorContains(t, err, "3 of 10 messages")
		require.Len(t, msgs, 3)
	})

	t.Run("EndedContextIsUnknown", func(t *testing.T) {
		b := ferrytest.NewBroker(nil)
		ended, cancel := context.WithCancel(ctx)
		cancel()
		r := b.Publish(ended, []ferrytype.Message{msg("e1", "a")})[0]
		require.Equal(t, ferrytype.OutcomeUnknown, r.Outcome)
		require.False(t, r.NotSent())
		require.Empty(t, b.Messages(""))
	})
}

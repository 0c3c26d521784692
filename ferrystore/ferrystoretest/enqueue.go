package ferrystoretest

import (
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrytype"
)

// exerciseEnqueue checks enqueue: ids, sequences, delays, rollback.
func exerciseEnqueue[TTx any](t *testing.T, h Harness[TTx]) {
	t.Run("EnqueueAndClaimRoundTrip", func(t *testing.T) {
		b := setup(t, h)
		in := ferry.Event{
			ID: "evt-roundtrip-1", AggregateType: "order", AggregateID: "42", Type: "OrderPaid",
			Payload:     json.RawMessage(`{"orderId":42,"amount":10,"note":"żółw ✓"}`),
			Headers:     map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-k": "v"},
			Destination: "orders.paid", Exchange: "orders",
		}
		ids := b.enqueue(t, in)
		require.Equal(t, []string{"evt-roundtrip-1"}, ids)
		msgs, token := b.claim(t, 10, false)
		require.Len(t, msgs, 1)
		m := msgs[0]
		require.Equal(t, in.ID, m.ID)
		require.Equal(t, "order", m.AggregateType)
		require.Equal(t, "42", m.AggregateID)
		require.Equal(t, int64(1), m.Sequence)
		require.Equal(t, "OrderPaid", m.Type)
		require.JSONEq(t, string(in.Payload), string(m.Payload))
		require.Equal(t, in.Headers, m.Headers)
		require.Equal(t, "orders.paid", m.Destination)
		require.Equal(t, "orders", m.Exchange)
		require.Equal(t, 1, m.Attempt)
		require.WithinDuration(t, time.Now(), m.CreatedAt, time.Hour, "created_at comes from the database clock")
		row := b.get(t, m.ID)
		require.Equal(t, ferrytype.StatusSending, row.Status)
		require.Equal(t, token, row.LeaseToken)
		require.True(t, row.LockedUntil.After(row.CreatedAt), "locked_until is set in the future")
	})

	t.Run("GeneratedIDsAreStableUUIDv7", func(t *testing.T) {
		b := setup(t, h)
		ids := b.enqueue(t, ev("A", "1", `{}`), ev("B", "1", `{}`))
		require.Len(t, ids, 2)
		require.NotEqual(t, ids[0], ids[1])
		for _, id := range ids {
			require.Len(t, id, 36)
			require.Equal(t, byte('7'), id[14], "UUID version 7")
		}
		msgs, _ := b.claim(t, 10, false)
		require.ElementsMatch(t, ids, idsOf(msgs))
	})

	t.Run("RollbackWritesNothing", func(t *testing.T) {
		b := setup(t, h)
		tx, _, rollback := h.Begin(b.ctx, t, b.store)
		_, err := b.ob.EnqueueTx(b.ctx, tx, ev("A", "1", `{}`))
		require.NoError(t, err)
		require.NoError(t, rollback())
		msgs, _ := b.claim(t, 10, false)
		require.Empty(t, msgs)
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Zero(t, st.New)
	})

	t.Run("BadInputWritesNothing", func(t *testing.T) {
		b := setup(t, h)
		big := `{"x":"` + strings.Repeat("a", ferry.DefaultMaxPayloadBytes) + `"}`
		cases := []struct {
			name string
			bad  ferry.Event
			want error
		}{
			{"InvalidJSON", ev("A", "1", `{"a":`), ferrytype.ErrInvalidPayload},
			{"EmptyPayload", ev("A", "1", ``), ferrytype.ErrInvalidPayload},
			{"Oversized", ev("A", "1", big), ferrytype.ErrPayloadTooLarge},
			{"NoType", ev("", "1", `{}`), ferrytype.ErrInvalidEvent},
			{"LongID", ferry.Event{ID: strings.Repeat("x", 65), Type: "A", Payload: json.RawMessage(`{}`)}, ferrytype.ErrInvalidEvent},
			{"NegativeDelay", ferry.Event{Type: "A", Payload: json.RawMessage(`{}`), Delay: -time.Second}, ferrytype.ErrInvalidEvent},
		}
		for _, c := range cases {
			tx, commit, _ := h.Begin(b.ctx, t, b.store)
			_, err := b.ob.EnqueueTx(b.ctx, tx, ev("Good", "1", `{"ok":true}`), c.bad)
			require.ErrorIs(t, err, c.want, c.name)
			// Even if the caller commits anyway, nothing was written:
			// validation runs before the first statement.
			require.NoError(t, commit(), c.name)
		}
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Zero(t, st.New, "a batch with one bad event writes none of its events")
	})

	t.Run("SequencePerAggregate", func(t *testing.T) {
		b := setup(t, h)
		b.enqueue(t, ev("A", "1", `{}`), ev("A", "2", `{}`), ev("B", "1", `{}`))
		b.enqueue(t, ev("C", "1", `{}`), ferry.Event{Type: "NoAggregate", Payload: json.RawMessage(`{}`)})
		msgs, _ := b.claim(t, 10, false)
		require.Len(t, msgs, 5)
		got := map[string][]int64{}
		for _, m := range msgs {
			got[m.AggregateID] = append(got[m.AggregateID], m.Sequence)
		}
		for k := range got {
			sort.Slice(got[k], func(i, j int) bool { return got[k][i] < got[k][j] })
		}
		require.Equal(t, map[string][]int64{"1": {1, 2, 3}, "2": {1}, "": {0}}, got)
	})

	t.Run("SkipSequenceWritesZero", func(t *testing.T) {
		b := setup(t, h)
		ob, err := ferry.NewOutbox(b.store, &ferry.OutboxConfig{SkipSequence: true})
		require.NoError(t, err)
		tx, commit, _ := h.Begin(b.ctx, t, b.store)
		_, err = ob.EnqueueTx(b.ctx, tx, ev("A", "1", `{}`), ev("B", "1", `{}`))
		require.NoError(t, err)
		require.NoError(t, commit())
		msgs, _ := b.claim(t, 10, false)
		require.Len(t, msgs, 2)
		for _, m := range msgs {
			require.Zero(t, m.Sequence)
			require.Equal(t, "1", m.AggregateID)
		}
	})

	t.Run("ConcurrentSequenceIsGapFree", func(t *testing.T) {
		b := setup(t, h)
		const writers, each = 8, 10
		var wg sync.WaitGroup
		errs := make(chan error, writers*each)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					errs <- retryTx(b.ctx, b.store, func() error {
						tx, commit, rollback := h.Begin(b.ctx, t, b.store)
						if _, err := b.ob.EnqueueTx(b.ctx, tx, ev("A", "hot", `{}`)); err != nil {
							_ = rollback()
							return err
						}
						return commit()
					})
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		msgs, _ := b.claim(t, 1000, false)
		require.Len(t, msgs, writers*each)
		seen := map[int64]bool{}
		for _, m := range msgs {
			require.False(t, seen[m.Sequence], "sequence %d given twice", m.Sequence)
			seen[m.Sequence] = true
		}
		for i := int64(1); i <= writers*each; i++ {
			require.True(t, seen[i], "sequence %d missing", i)
		}
	})

	t.Run("DelayedEventWaits", func(t *testing.T) {
		b := setup(t, h)
		b.enqueue(t, ferry.Event{Type: "Later", Payload: json.RawMessage(`{}`), Delay: time.Hour})
		msgs, _ := b.claim(t, 10, false)
		require.Empty(t, msgs)
		st, err := b.store.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), st.New)
		require.Zero(t, st.Ready)
	})
}

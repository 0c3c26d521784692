package ferrykafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// recordingPublisher records every batch it publishes and every outcome
// of every event id, and passes Connected on so that the relay sees it.
type recordingPublisher struct {
	*ferrykafka.Publisher
	mu       sync.Mutex
	batches  [][]string
	outcomes map[string][]ferrytype.Outcome
}

func (p *recordingPublisher) Publish(ctx context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	res := p.Publisher.Publish(ctx, msgs)
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]string, len(msgs))
	for i, r := range res {
		ids[i] = msgs[i].ID
		p.outcomes[msgs[i].ID] = append(p.outcomes[msgs[i].ID], r.Outcome)
	}
	p.batches = append(p.batches, ids)
	return res
}

// published returns the batches published so far.
func (p *recordingPublisher) published() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]string(nil), p.batches...)
}

func (p *recordingPublisher) unknown(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range p.outcomes[id] {
		if o == ferrytype.OutcomeUnknown {
			return true
		}
	}
	return false
}

// A relay on a SQLite outbox publishes 200 events of 20 aggregates to
// kfake and crashes between a produce and its mark; a second relay takes
// over once the leases expire. Every event reaches Kafka at least once;
// the only events there twice are those whose publish had no recorded
// outcome (the crashed batch, or an unknown outcome); and each aggregate's
// events are in one partition, in sequence order.
func TestRelayCrashBetweenProduceAndMark(t *testing.T) {
	t.Parallel()
	k := testsvc.NewKafka(t)
	topic := testsvc.KafkaTopic(t, k.Seeds, 4)
	st := testsvc.Store(t, "sqlite")
	ctx := testsvc.Context(t, 2*time.Minute)
	ob, err := ferry.NewOutbox(st.Driver, nil)
	require.NoError(t, err)
	const total, aggregates = 200, 20
	var ids []string
	for start := 0; start < total; start += 50 {
		tx, err := st.DB.BeginTx(ctx, nil)
		require.NoError(t, err)
		var batch []ferry.Event
		for i := start; i < start+50; i++ {
			batch = append(batch, ferry.Event{AggregateType: "order", AggregateID: fmt.Sprintf("a%d", i%aggregates),
				Type: "OrderPaid", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), Destination: topic})
		}
		got, err := ob.EnqueueTx(ctx, tx, batch...)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		ids = append(ids, got...)
	}

	publisher := func() *recordingPublisher {
		p, err := ferrykafka.Dial(ctx, seedURL(k.Seeds), &ferrykafka.Config{Topics: []string{topic}, PingInterval: pingEvery})
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		return &recordingPublisher{Publisher: p, outcomes: map[string][]ferrytype.Outcome{}}
	}
	retry := ferry.ExponentialBackoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond, MaxAttempts: 50}

	// Relay A crashes after producing its second batch, before marking
	// it: from then on every fault point fails, as if it were gone.
	pubA := publisher()
	var crashed atomic.Bool
	var crashedIDs []string
	crash := make(chan struct{})
	relayA, err := ferry.NewRelay(st.Driver, pubA, &ferry.RelayConfig{
		Lanes: 1, BatchSize: 40, Ordered: true, Lease: 2 * time.Second, PublishTimeout: 1500 * time.Millisecond,
		SweepInterval: -1, PollInterval: 20 * time.Millisecond, Retry: retry,
		// No heartbeat row: the relay that sweeps A's batch leads the
		// table's maintenance at once, instead of four beats after A's
		// row goes silent.
		Heartbeat: ferry.HeartbeatConfig{Interval: -1},
	})
	require.NoError(t, err)
	require.NoError(t, relayA.Start(ferryfault.With(ctx, func(ctx context.Context, point string) error {
		if crashed.Load() {
			return errors.New("relay A is gone")
		}
		if b := pubA.published(); point == ferryfault.RelayAfterPublish && len(b) == 2 {
			crashedIDs = b[1]
			crashed.Store(true)
			close(crash)
			return errors.New("crash between produce and mark")
		}
		return nil
	})))
	<-crash
	require.NoError(t, relayA.Stop(ctx))
	require.NotEmpty(t, crashedIDs)

	pubB := publisher()
	relayB, err := ferry.NewRelay(st.Driver, pubB, &ferry.RelayConfig{
		Ordered: true, SweepInterval: 50 * time.Millisecond, PollInterval: 20 * time.Millisecond, Retry: retry,
	})
	require.NoError(t, err)
	require.NoError(t, relayB.Start(ctx))
	t.Cleanup(func() { _ = relayB.Stop(context.Background()) })
	testsvc.WaitFor(t, time.Minute, func() bool {
		s, err := st.Driver.Stats(ctx)
		require.NoError(t, err)
		return s.New == 0 && s.Sending == 0
	}, func() string { return fmt.Sprintf("relay B: %+v", relayB.Stats()) })
	s, err := st.Driver.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, s.Dead)
	require.NoError(t, relayB.Stop(ctx))

	recs := testsvc.ReadKafka(t, k.Seeds, topic, total+len(crashedIDs), 30*time.Second)
	got := map[string]int{}
	for _, r := range received(recs) {
		got[r.ID]++
	}
	inCrash := map[string]bool{}
	for _, id := range crashedIDs {
		inCrash[id] = true
	}
	extra := 0
	for _, id := range ids {
		row, err := st.Driver.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, ferrytype.StatusSent, row.Status, "event %s", id)
		require.GreaterOrEqual(t, got[id], 1, "event %s is not in Kafka", id)
		if inCrash[id] {
			require.GreaterOrEqual(t, got[id], 2, "event %s: produced by A, then by B", id)
		}
		if got[id] > 1 {
			extra += got[id] - 1
			require.True(t, inCrash[id] || pubA.unknown(id) || pubB.unknown(id),
				"event %s is in Kafka %d times, and every publish of it had an outcome", id, got[id])
		}
	}
	require.Len(t, got, total, "nothing else is in Kafka")
	requireAggregateOrder(t, recs, aggregates)
	t.Logf("crashed batch %d events; extra copies %d; relay A %+v; relay B %+v", len(crashedIDs), extra,
		relayA.Stats(), relayB.Stats())
}

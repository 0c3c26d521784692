package ferrykafka_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// faultBundle is a Dial'd publisher on a fresh kfake cluster with one
// topic.
type faultBundle struct {
	k     *testsvc.KafkaCluster
	topic string
	p     *ferrykafka.Publisher
	ctx   context.Context
	logs  *testsvc.LogBuffer
}

func setupFaults(t *testing.T, partitions int32, opts ...kgo.Opt) *faultBundle {
	t.Helper()
	k := testsvc.NewKafka(t)
	b := &faultBundle{k: k, topic: testsvc.KafkaTopic(t, k.Seeds, partitions), ctx: testsvc.Context(t, time.Minute),
		logs: &testsvc.LogBuffer{}}
	var err error
	b.p, err = ferrykafka.Dial(b.ctx, seedURL(k.Seeds), &ferrykafka.Config{Topics: []string{b.topic}, PingInterval: pingEvery,
		ClientOpts: opts, Logger: slog.New(slog.NewTextHandler(b.logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { b.p.Close() })
	return b
}

// publishAsync publishes batch in the background; the returned channel
// yields the results.
func (b *faultBundle) publishAsync(ctx context.Context, batch []ferrytype.Message) <-chan []ferrytype.PublishResult {
	done := make(chan []ferrytype.PublishResult, 1)
	go func() { done <- b.p.Publish(ctx, batch) }()
	return done
}

// requireUnknownSettled checks what became of unknown, a batch whose
// records all ended unknown: each is stored once, or not at all (franz-go
// kept it and produced it once the fault was gone, or the client ended
// on a fatal producer error before it could). A batch of the same
// aggregates, published after, is confirmed, so that everything before it
// in their partitions is settled when the topic is read.
func (b *faultBundle) requireUnknownSettled(t *testing.T, unknown []ferrytype.Message) {
	t.Helper()
	after := make([]ferrytype.Message, 0, len(unknown))
	for i, m := range unknown {
		m.ID = fmt.Sprintf("%s-after-%d", m.ID, i)
		after = append(after, m)
	}
	requireAll(t, ferrytype.OutcomeConfirmed, b.p.Publish(b.ctx, after))
	got := map[string]int{}
	for _, r := range received(testsvc.ReadKafka(t, b.k.Seeds, b.topic, len(after), 30*time.Second)) {
		got[r.ID]++
	}
	stored := 0
	for _, m := range unknown {
		require.LessOrEqual(t, got[m.ID], 1, "event %s", m.ID)
		stored += got[m.ID]
	}
	for _, m := range after {
		require.Equal(t, 1, got[m.ID], "event %s", m.ID)
	}
	require.Len(t, got, stored+len(after), "nothing else is stored")
	t.Logf("%d of %d unknown records stored; publisher log: %q", stored, len(unknown), b.logs.Lines())
}

func produceFault(topic string, err *kerr.Error, count int) kfake.Fault {
	return kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: err, Count: count}
}

// NOT_ENOUGH_REPLICAS_AFTER_APPEND: the leader wrote the records but too
// few replicas have them. franz-go retries without end (it cannot know
// whether the records are stored); when ctx ends they are unknown, never
// rejected: those the leader took are in the log.
func TestNotEnoughReplicasAfterAppendIsUnknown(t *testing.T) {
	t.Parallel()
	b := setupFaults(t, 1)
	h := b.k.Fault(produceFault(b.topic, kerr.NotEnoughReplicasAfterAppend, -1))
	batch := msgs(b.topic, 5, 1)
	ctx, cancel := context.WithCancel(b.ctx)
	done := b.publishAsync(ctx, batch)
	require.NoError(t, h.Wait(b.ctx, 2), "the produce is retried")
	cancel()
	res := <-done
	requireAll(t, ferrytype.OutcomeUnknown, res)
	require.ErrorIs(t, res[0].Err, context.Canceled)
	h.Remove()
	b.requireUnknownSettled(t, batch)
}

// MESSAGE_TOO_LARGE from the broker (over the topic's max.message.bytes)
// and from franz-go (over its batch limit, before sending) is rejected,
// and nothing of the message is stored.
func TestMessageTooLargeIsRejected(t *testing.T) {
	t.Parallel()
	k := testsvc.NewKafka(t)
	ctx := testsvc.Context(t, time.Minute)
	cl, _ := client(t, k.Seeds)
	topic := testsvc.Name("small-")
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": kadm.StringPtr("2000")}, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	p, err := ferrykafka.Dial(ctx, seedURL(k.Seeds), &ferrykafka.Config{Topics: []string{topic}})
	require.NoError(t, err)
	defer p.Close()
	for _, size := range []int{10_000, 2_000_000} {
		m := msgs(topic, 1, 1)[0]
		// Random bytes: franz-go compresses batches, and a run of one
		// letter would shrink below the limit.
		pad := make([]byte, size/2)
		_, _ = rand.Read(pad)
		m.Payload = []byte(`{"pad":"` + hex.EncodeToString(pad) + `"}`)
		r := p.Publish(ctx, []ferrytype.Message{m})[0]
		require.Equal(t, ferrytype.OutcomeRejected, r.Outcome, "%d bytes: %v", size, r.Err)
		require.ErrorIs(t, r.Err, kerr.MessageTooLarge)
	}
	small := msgs(topic, 1, 1)
	requireAll(t, ferrytype.OutcomeConfirmed, p.Publish(ctx, small))
	got := received(testsvc.ReadKafka(t, k.Seeds, topic, 1, 30*time.Second))
	require.Len(t, got, 1, "only the small message is stored")
	require.Equal(t, small[0].ID, got[0].ID)
}

// A topic the brokers stop knowing (UNKNOWN_TOPIC_OR_PARTITION on every
// produce) is unroutable once franz-go's unknown-topic retries are spent,
// and the error names the topic.
func TestUnknownTopicAfterRetriesIsUnroutable(t *testing.T) {
	t.Parallel()
	b := setupFaults(t, 1, kgo.UnknownTopicRetries(2), kgo.MetadataMinAge(20*time.Millisecond))
	b.k.Fault(produceFault(b.topic, kerr.UnknownTopicOrPartition, -1))
	res := b.p.Publish(b.ctx, msgs(b.topic, 3, 1))
	requireAll(t, ferrytype.OutcomeReturned, res)
	require.ErrorContains(t, res[0].Err, fmt.Sprintf("topic %q", b.topic))
	require.ErrorIs(t, res[0].Err, kerr.UnknownTopicOrPartition)
}

// Leaders move between batches and refuse produces (NOT_LEADER) within
// one: franz-go follows them, every record is confirmed once, and each
// aggregate stays in one partition, in order.
func TestLeaderChangeIsConfirmed(t *testing.T) {
	t.Parallel()
	b := setupFaults(t, 6, kgo.MetadataMinAge(20*time.Millisecond))
	all := msgs(b.topic, 400, 12)
	for start := 0; start < len(all); start += 100 {
		h := b.k.Fault(produceFault(b.topic, kerr.NotLeaderForPartition, 3))
		requireAll(t, ferrytype.OutcomeConfirmed, b.p.Publish(b.ctx, all[start:start+100]))
		require.Equal(t, 3, h.Hits())
		b.k.ShufflePartitionLeaders()
	}
	recs := testsvc.ReadKafka(t, b.k.Seeds, b.topic, len(all), 30*time.Second)
	require.Len(t, recs, len(all), "each event once")
	requireAggregateOrder(t, recs, 12)
}

// The brokers close every new connection at its first request (a broker
// restarting, a load balancer draining): the publisher's ping fails, it
// reports itself disconnected and every record of a Publish meanwhile is
// not sent, no attempt spent. Its errors say what happened — the broker
// closed a new connection — not franz-go's guess at a cause ("is TLS
// missing?"), which is wrong here. When the brokers answer again, so does
// the publisher, and nothing of the batches not sent is stored.
func TestConnectionsClosedAtFirstRequestAreStatedNotGuessed(t *testing.T) {
	t.Parallel()
	b := setupFaults(t, 1)
	first := msgs(b.topic, 2, 1)
	requireAll(t, ferrytype.OutcomeConfirmed, b.p.Publish(b.ctx, first))
	var failing atomic.Bool
	failing.Store(true)
	var closed atomic.Int64
	b.k.ControlKey(int16(kmsg.ApiVersions), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !failing.Load() {
			b.k.DropControl()
			return nil, nil, false
		}
		b.k.KeepControl()
		closed.Add(1)
		return nil, errors.New("connection closed at its first request"), true
	})
	b.k.Drop() // the publisher's connections: it must open new ones
	testsvc.WaitFor(t, 30*time.Second, func() bool { return b.p.Disconnected() != nil },
		func() string { return fmt.Sprintf("still connected; %d connections closed", closed.Load()) })
	down := b.p.Disconnected()
	require.ErrorContains(t, down, "closed a new connection before answering its first request")
	require.NotContains(t, down.Error(), "missing?", "no guess at a cause")
	var fe *kgo.ErrFirstReadEOF
	require.ErrorAs(t, down, &fe, "franz-go's error is still in the chain")
	held := msgs(b.topic, 3, 1)
	for i, r := range b.p.Publish(b.ctx, held) {
		require.True(t, r.NotSent(), "record %d: %v", i, r.Err)
		require.NotContains(t, r.Err.Error(), "missing?")
	}
	failing.Store(false)
	testsvc.WaitFor(t, 30*time.Second, b.p.Connected, func() string { return fmt.Sprint(b.p.Disconnected()) })
	after := msgs(b.topic, 2, 1)
	for i := range after {
		after[i].ID += "-after"
	}
	requireAll(t, ferrytype.OutcomeConfirmed, b.p.Publish(b.ctx, after))
	got := received(testsvc.ReadKafka(t, b.k.Seeds, b.topic, len(first)+len(after), 30*time.Second))
	require.Len(t, got, len(first)+len(after), "nothing of the batch not sent is stored")
	for _, r := range got[len(first):] {
		require.Contains(t, r.ID, "-after")
	}
}

// failProduces makes the brokers close the connection of every produce
// request, unanswered, until the returned func is called; each failed
// request is signalled on the channel.
func failProduces(k *testsvc.KafkaCluster) (<-chan struct{}, func()) {
	var failing atomic.Bool
	failing.Store(true)
	hits := make(chan struct{}, 1)
	k.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !failing.Load() {
			k.DropControl()
			return nil, nil, false
		}
		k.KeepControl()
		select {
		case hits <- struct{}{}:
		default:
		}
		return nil, errors.New("connection dropped mid produce"), true
	})
	return hits, func() { failing.Store(false) }
}

// The connection drops with the produce request in flight, again and
// again: the records are unknown when ctx ends, not "not sent" (the
// request was written), and the client, which keeps them, stores each at
// most once when the connection holds again.
func TestDroppedConnectionMidProduceIsUnknown(t *testing.T) {
	t.Parallel()
	b := setupFaults(t, 2)
	hits, heal := failProduces(b.k)
	batch := msgs(b.topic, 20, 4)
	ctx, cancel := context.WithCancel(b.ctx)
	done := b.publishAsync(ctx, batch)
	<-hits
	cancel()
	res := <-done
	requireAll(t, ferrytype.OutcomeUnknown, res)
	require.False(t, res[0].NotSent(), "the request may have been written: %v", res[0].Err)
	heal()
	b.requireUnknownSettled(t, batch)
}

// franz-go's idempotent producer does not give up a record in flight
// when its context ends (twmb/franz-go#1202, #1217): the produce request
// is stuck at the broker, and Publish still returns as soon as ctx ends,
// with every record unknown. The client keeps them, and stores each at
// most once when the broker answers.
func TestCanceledWhileProduceStuckReturnsPromptly(t *testing.T) {
	t.Parallel()
	b := setupFaults(t, 1)
	release := make(chan struct{})
	var once sync.Once
	unstick := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unstick)
	stuck := make(chan struct{})
	var slept atomic.Bool
	b.k.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !slept.CompareAndSwap(false, true) {
			b.k.DropControl()
			return nil, nil, false
		}
		close(stuck)
		b.k.SleepControl(func() { <-release })
		return nil, nil, false // then handled as usual
	})
	batch := msgs(b.topic, 10, 2)
	ctx, cancel := context.WithCancel(b.ctx)
	done := b.publishAsync(ctx, batch)
	<-stuck
	cancel()
	select {
	case res := <-done:
		requireAll(t, ferrytype.OutcomeUnknown, res)
		require.ErrorIs(t, res[0].Err, context.Canceled)
	case <-time.After(15 * time.Second):
		t.Fatal("Publish waits for a stuck produce after its context ended")
	}
	unstick()
	b.requireUnknownSettled(t, batch)
}

// A fatal producer error (OUT_OF_ORDER_SEQUENCE_NUMBER) ends franz-go's
// client: its records are unknown, and the Dial'd publisher produces on a
// new client from the next batch on.
func TestFatalProducerErrorRebuildsTheClient(t *testing.T) {
	t.Parallel()
	b := setupFaults(t, 1)
	requireAll(t, ferrytype.OutcomeConfirmed, b.p.Publish(b.ctx, msgs(b.topic, 5, 1)))
	old := b.p.Client()
	b.k.Fault(produceFault(b.topic, kerr.OutOfOrderSequenceNumber, 1))
	res := b.p.Publish(b.ctx, msgs(b.topic, 5, 1))
	requireAll(t, ferrytype.OutcomeUnknown, res)
	require.ErrorIs(t, res[0].Err, kerr.OutOfOrderSequenceNumber)
	requireAll(t, ferrytype.OutcomeConfirmed, b.p.Publish(b.ctx, msgs(b.topic, 5, 1)))
	require.NotSame(t, old, b.p.Client(), "the client was replaced")
	require.True(t, b.p.Connected(), "%v", b.p.Disconnected())
}

// A client the caller owns cannot be replaced: after a fatal producer
// error the publisher says so and sends nothing more.
func TestFatalProducerErrorOnCallersClient(t *testing.T) {
	t.Parallel()
	k := testsvc.NewKafka(t)
	topic := testsvc.KafkaTopic(t, k.Seeds, 1)
	ctx := testsvc.Context(t, time.Minute)
	cl, _ := client(t, k.Seeds, kgo.StopProducerOnDataLossDetected())
	p, err := ferrykafka.New(ctx, cl, &ferrykafka.Config{Topics: []string{topic}})
	require.NoError(t, err)
	requireAll(t, ferrytype.OutcomeConfirmed, p.Publish(ctx, msgs(topic, 2, 1)))
	k.Fault(produceFault(topic, kerr.OutOfOrderSequenceNumber, 1))
	res := p.Publish(ctx, msgs(topic, 2, 1))
	requireAll(t, ferrytype.OutcomeUnknown, res)
	require.ErrorIs(t, res[0].Err, kerr.OutOfOrderSequenceNumber)
	// The publisher copies the caller's client and produces on the copy.
	requireAll(t, ferrytype.OutcomeConfirmed, p.Publish(ctx, msgs(topic, 2, 1)))
	require.True(t, p.Connected(), "%v", p.Disconnected())
	own := p.Client()
	require.NotSame(t, cl, own, "produced on a client of its own")
	require.NoError(t, p.Close())
	require.NoError(t, cl.Ping(ctx), "the caller's client is not closed")
	require.Error(t, own.Ping(ctx), "the publisher's own client is closed")
}

// A caller's client that also consumes is not copied (the copy would join
// its group): after a fatal producer error the publisher stays
// disconnected, says why and what to do, and publishes nothing: every
// record is not sent, no attempt spent.
func TestFatalProducerErrorOnCallersConsumingClient(t *testing.T) {
	t.Parallel()
	k := testsvc.NewKafka(t)
	topic := testsvc.KafkaTopic(t, k.Seeds, 1)
	ctx := testsvc.Context(t, time.Minute)
	cl, _ := client(t, k.Seeds, kgo.StopProducerOnDataLossDetected(), kgo.ConsumeTopics(topic))
	p, err := ferrykafka.New(ctx, cl, &ferrykafka.Config{Topics: []string{topic}})
	require.NoError(t, err)
	defer p.Close()
	requireAll(t, ferrytype.OutcomeConfirmed, p.Publish(ctx, msgs(topic, 2, 1)))
	k.Fault(produceFault(topic, kerr.OutOfOrderSequenceNumber, 1))
	requireAll(t, ferrytype.OutcomeUnknown, p.Publish(ctx, msgs(topic, 2, 1)))
	require.False(t, p.Connected())
	require.ErrorContains(t, p.Disconnected(), "build a new client and publisher")
	require.ErrorIs(t, p.Disconnected(), kerr.OutOfOrderSequenceNumber)
	for _, r := range p.Publish(ctx, msgs(topic, 2, 1)) {
		require.True(t, r.NotSent(), "%v", r.Err)
	}
	require.Same(t, cl, p.Client())
}

// The before-confirm fault point is reached once the records were handed
// over: an error there makes them unknown, and they are stored.
func TestFaultPointBeforeConfirm(t *testing.T) {
	t.Parallel()
	k := testsvc.NewKafka(t)
	topic := testsvc.KafkaTopic(t, k.Seeds, 1)
	ctx := testsvc.Context(t, time.Minute)
	var points []string
	p, err := ferrykafka.Dial(ctx, seedURL(k.Seeds), &ferrykafka.Config{Topics: []string{topic}})
	require.NoError(t, err)
	defer p.Close()
	batch := msgs(topic, 3, 1)
	res := p.Publish(ferryfault.With(ctx, func(_ context.Context, point string) error {
		points = append(points, point)
		return errors.New("injected crash")
	}), batch)
	requireAll(t, ferrytype.OutcomeUnknown, res)
	require.ErrorContains(t, res[0].Err, "injected crash")
	require.Equal(t, []string{ferryfault.PublishBeforeConfirm}, points)
	got := received(testsvc.ReadKafka(t, k.Seeds, topic, 3, 30*time.Second))
	require.Len(t, got, 3)
}

package testsvc

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrydev/ferry/internal/faultnet"
)

// KafkaCluster is an in-process Kafka cluster (franz-go's kfake, which
// speaks the real protocol) of three brokers, each listening on a loopback
// port through a faultnet.Listener, so that a test can cut the cluster
// off the network and restore it: kfake advertises its brokers' own
// addresses, so a proxy in front of it would be bypassed.
type KafkaCluster struct {
	*kfake.Cluster
	// Seeds are the brokers' host:port addresses.
	Seeds []string

	mu  sync.Mutex
	lns []*faultnet.Listener
}

// NewKafka starts a three-broker kfake cluster, with opts added to the
// defaults, and closes it when the test ends. It needs no external
// service: tests on it never skip.
func NewKafka(t testing.TB, opts ...kfake.Opt) *KafkaCluster {
	t.Helper()
	k := &KafkaCluster{}
	listen := func(network, address string) (net.Listener, error) {
		ln, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		w := faultnet.WrapListener(ln)
		k.mu.Lock()
		k.lns = append(k.lns, w)
		k.mu.Unlock()
		return w, nil
	}
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(3), kfake.ListenFn(listen)}, opts...)...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	k.Cluster = c
	k.Seeds = c.ListenAddrs()
	return k
}

// Kafka starts a three-broker kfake cluster (see NewKafka) and returns its
// seed brokers.
func Kafka(t testing.TB, opts ...kfake.Opt) (seeds []string) {
	t.Helper()
	return NewKafka(t, opts...).Seeds
}

// Cut makes every broker unreachable: open connections are closed, new
// ones are closed on accept, until Restore.
func (k *KafkaCluster) Cut() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, ln := range k.lns {
		ln.Cut()
	}
}

// Restore makes the brokers reachable again after Cut.
func (k *KafkaCluster) Restore() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, ln := range k.lns {
		ln.Restore()
	}
}

// Refused counts the connections the brokers closed on accept while cut.
func (k *KafkaCluster) Refused() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	var n int64
	for _, ln := range k.lns {
		n += ln.Refused()
	}
	return n
}

// Drop closes every open connection to the brokers, which accept new ones
// at once.
func (k *KafkaCluster) Drop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, ln := range k.lns {
		ln.Drop()
	}
}

// KafkaTopic creates a topic with a fresh name and the given number of
// partitions on the cluster at seeds, and returns its name.
func KafkaTopic(t testing.TB, seeds []string, partitions int32) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	name := Name("ft-")
	resp, err := kadm.NewClient(cl).CreateTopic(Context(t, 30*time.Second), partitions, 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
	return name
}

// ReadKafka reads every record of topic from the start of each partition,
// waiting up to d for at least want of them, and returns them all, in
// offset order within each partition.
func ReadKafka(t testing.TB, seeds []string, topic string, want int, d time.Duration) []*kgo.Record {
	t.Helper()
	ctx := Context(t, d)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var out []*kgo.Record
	for {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatalf("end offsets of %s: %v", topic, err)
		}
		var total int64
		ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
		if len(out) >= want && int64(len(out)) >= total {
			return out
		}
		pollCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		fetches := cl.PollFetches(pollCtx)
		cancel()
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				t.Fatalf("fetch %s/%d: %v", topic, p, err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) { out = append(out, r) })
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records from %s within %s", len(out), want, topic, d)
		}
	}
}

// WaitKafkaRecords waits up to d until topic holds at least n records in
// all, and fails the test if it does not.
func WaitKafkaRecords(t testing.TB, seeds []string, topic string, n int64, d time.Duration) {
	t.Helper()
	ctx := Context(t, d)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			var total int64
			ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
			if total >= n {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not reach %d records within %s (last error: %v)", topic, n, d, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

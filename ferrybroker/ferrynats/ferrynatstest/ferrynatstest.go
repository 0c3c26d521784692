// Package ferrynatstest runs tests against a real NATS server with
// JetStream: it connects to the server FERRY_TEST_NATS_URL names (default
// nats://127.0.0.1:4222), skipping the test when it is unreachable unless
// FERRY_REQUIRE_SERVICES=1, creates fresh streams that are deleted when the
// test ends, and reads a stream back in order. ferry's own tests use it; so
// can the tests of an application that runs ferrynats. It imports nothing
// but the core and nats.go.
package ferrynatstest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/internal/testenv"
)

// JetStreamStream creates a stream with a fresh name capturing subject
// prefix+".>" and deletes it when the test ends. It returns the stream name
// and the prefix.
func JetStreamStream(t testing.TB, nc *nats.Conn) (stream, prefix string) {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream = testenv.Name("FT_")
	prefix = testenv.Name("ft")
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name: stream, Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
	})
	if err != nil {
		t.Fatalf("create stream %s: %v", stream, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, stream)
	})
	return stream, prefix
}

// StreamMsg is a message read back from a stream.
type StreamMsg struct {
	ID          string // Nats-Msg-Id
	Subject     string
	AggregateID string
	Sequence    int64
	Type        string
	Data        []byte
	Header      nats.Header
}

// ReadStream reads every message of stream in order, waiting up to d for
// at least want of them, and returns them all.
func ReadStream(t testing.TB, nc *nats.Conn, stream string, want int, d time.Duration) []StreamMsg {
	t.Helper()
	ctx := testenv.Context(t, d)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("consumer on %s: %v", stream, err)
	}
	var out []StreamMsg
	for {
		info, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatalf("stream info: %v", err)
		}
		total := int(info.CachedInfo().State.Msgs)
		if len(out) >= want && len(out) >= total {
			return out
		}
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			t.Fatalf("fetch from %s: %v", stream, err)
		}
		for m := range batch.Messages() {
			h := m.Headers()
			seq, _ := strconv.ParseInt(h.Get(ferrybroker.HeaderSequence), 10, 64)
			out = append(out, StreamMsg{
				ID: h.Get(jetstream.MsgIDHeader), Subject: m.Subject(), AggregateID: h.Get(ferrybroker.HeaderAggregateID),
				Sequence: seq, Type: h.Get(ferrybroker.HeaderEventType), Data: m.Data(), Header: h,
			})
		}
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d messages from %s within %s", len(out), want, stream, d)
		}
	}
}

// NATS returns a connection to the test NATS server (with JetStream),
// closed when the test ends.
func NATS(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(testenv.URL(testenv.EnvNATS), nats.Timeout(3*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		testenv.Unavailable(t, "NATS at "+testenv.URL(testenv.EnvNATS), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

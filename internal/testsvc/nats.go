package testsvc

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/ferrybroker"
)

// JetStreamStream creates a stream with a fresh name capturing subject
// prefix+".>" and deletes it when the test ends. It returns the stream name
// and the prefix.
func JetStreamStream(t testing.TB, nc *nats.Conn) (stream, prefix string) {
	t.Helper()
	ctx := Context(t, 30*time.Second)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream = Name("FT_")
	prefix = Name("ft")
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
	ctx := Context(t, d)
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

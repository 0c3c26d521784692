package ferrywatermill_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/ferrywatermill"
)

// fakePub is a Watermill publisher whose Publish does what fail says for
// each message: the logic of ferrywatermill.Publisher, without a broker
// (the real ones run in integration/ferrywatermill).
type fakePub struct {
	mu      sync.Mutex
	got     []string // UUIDs, in call order
	fail    func(msg *message.Message) error
	onClose func() error // what Close does after counting the call
	closed  bool
	closes  int
}

func (f *fakePub) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if f.fail != nil {
			if err := f.fail(m); err != nil {
				return err
			}
		}
		f.mu.Lock()
		f.got = append(f.got, m.UUID)
		f.mu.Unlock()
	}
	return nil
}

func (f *fakePub) Close() error {
	f.mu.Lock()
	f.closed = true
	f.closes++
	f.mu.Unlock()
	if f.onClose != nil {
		return f.onClose()
	}
	return nil
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newPub(t *testing.T, f *fakePub, cfg ferrywatermill.PublisherConfig) *ferrywatermill.Publisher {
	t.Helper()
	if cfg.Guarantee == 0 {
		cfg.Guarantee = ferrywatermill.Stored
	}
	cfg.Logger = quiet()
	p, err := ferrywatermill.NewPublisher(f, &cfg)
	require.NoError(t, err)
	return p
}

func events(aggs ...string) []ferrytype.Message {
	out := make([]ferrytype.Message, len(aggs))
	for i, a := range aggs {
		out[i] = ferrytype.Message{ID: fmt.Sprintf("e%d", i), Type: "OrderPaid", AggregateType: "order", AggregateID: a,
			Destination: "orders", Payload: []byte(`{}`)}
	}
	return out
}

func TestNewPublisherRefusesWhatItCannotUse(t *testing.T) {
	var typedNil *fakePub
	for _, pub := range []message.Publisher{nil, typedNil} {
		_, err := ferrywatermill.NewPublisher(pub, &ferrywatermill.PublisherConfig{Guarantee: ferrywatermill.Stored})
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	}
	_, err := ferrywatermill.NewPublisher(&fakePub{}, nil)
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	_, err = ferrywatermill.NewPublisher(&fakePub{}, &ferrywatermill.PublisherConfig{})
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	require.ErrorContains(t, err, "Guarantee")
	_, err = ferrywatermill.NewPublisher(&fakePub{}, &ferrywatermill.PublisherConfig{Guarantee: ferrywatermill.Stored, Concurrency: -1})
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
}

// Every message gets its own outcome; an error is unknown, never
// confirmed; after an aggregate's event fails, its later events in the
// batch are not sent (not even tried), so the aggregate's order holds,
// while other aggregates go on.
func TestPublishOutcomesAndAggregateOrder(t *testing.T) {
	f := &fakePub{fail: func(m *message.Message) error {
		if m.UUID == "e1" {
			return errors.New("broker said no, or the connection dropped after the write")
		}
		return nil
	}}
	p := newPub(t, f, ferrywatermill.PublisherConfig{Concurrency: 1})
	res := p.Publish(context.Background(), events("a", "a", "b", "a", "b"))
	require.Equal(t, ferrytype.OutcomeConfirmed, res[0].Outcome)
	require.Equal(t, ferrytype.OutcomeUnknown, res[1].Outcome)
	require.False(t, res[1].NotSent(), "an error may follow the broker storing it: %v", res[1].Err)
	require.Equal(t, ferrytype.OutcomeConfirmed, res[2].Outcome)
	require.True(t, res[3].NotSent(), "after e1 failed, e3 of the same aggregate is not tried: %v", res[3].Err)
	require.Equal(t, ferrytype.OutcomeConfirmed, res[4].Outcome)
	require.NotContains(t, f.got, "e3")
	require.Less(t, indexOf(f.got, "e0"), len(f.got))
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return len(s)
}

// An error PublisherConfig.NotSent recognises is not sent; a panic in the
// Watermill publisher is an unknown outcome, not a crash.
func TestNotSentClassifierAndPanics(t *testing.T) {
	f := &fakePub{fail: func(m *message.Message) error {
		switch m.UUID {
		case "e0":
			return &net.OpError{Op: "dial", Err: errors.New("connection refused")}
		case "e1":
			panic("nil map")
		}
		return nil
	}}
	p := newPub(t, f, ferrywatermill.PublisherConfig{NotSent: func(err error) bool {
		var op *net.OpError
		return errors.As(err, &op) && op.Op == "dial"
	}})
	res := p.Publish(context.Background(), events("a", "b"))
	require.True(t, res[0].NotSent(), "%v", res[0].Err)
	require.Equal(t, ferrytype.OutcomeUnknown, res[1].Outcome)
	require.ErrorContains(t, res[1].Err, "panicked: nil map")
}

// A context already ended sends nothing; one that ends while a Watermill
// call blocks makes it unknown at once, and Close waits for the call.
func TestContextEndsAndClose(t *testing.T) {
	release := make(chan struct{})
	f := &fakePub{fail: func(m *message.Message) error { <-release; return nil }}
	p := newPub(t, f, ferrywatermill.PublisherConfig{})
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, r := range p.Publish(ended, events("a", "b")) {
		require.True(t, r.NotSent(), "%v", r.Err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	res := p.Publish(ctx, events("a"))
	require.Equal(t, ferrytype.OutcomeUnknown, res[0].Outcome)
	require.False(t, res[0].NotSent(), "the call is under way: %v", res[0].Err)
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned while a Watermill call was running")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-closed)
	require.True(t, f.closed)
	require.NoError(t, p.Close(), "twice")
}

// A panic in the Watermill publisher's Close (watermill-amqp v3.0.2 with a
// channel pool, once a pooled channel failed to reopen after a reconnect,
// closes a nil AMQP channel) is Close's error, in the form Publish gives
// one, not a crash at shutdown; closing again returns the same error
// without calling the Watermill publisher again.
func TestCloseRecoversAPanic(t *testing.T) {
	f := &fakePub{onClose: func() error {
		var ch *struct{ err error } // the pooled channel that failed to reopen
		return ch.err               // a nil pointer dereference, as in watermill-amqp
	}}
	p := newPub(t, f, ferrywatermill.PublisherConfig{})
	var first, second error
	require.NotPanics(t, func() { first = p.Close() })
	require.EqualError(t, first, "the Watermill publisher panicked: runtime error: invalid memory address or nil pointer dereference")
	require.NotPanics(t, func() { second = p.Close() })
	require.Equal(t, first, second)
	require.Equal(t, 1, f.closes)

	f = &fakePub{onClose: func() error { return errors.New("connection already closed") }}
	p = newPub(t, f, ferrywatermill.PublisherConfig{})
	require.EqualError(t, p.Close(), "connection already closed", "an error of Close is returned as it is")
	require.EqualError(t, p.Close(), "connection already closed")
	require.Equal(t, 1, f.closes)
}

// The connectivity probe keeps messages from the Watermill publisher
// while it reports an error.
func TestConnectivityProbe(t *testing.T) {
	var down error = errors.New("broker unreachable")
	f := &fakePub{}
	p := newPub(t, f, ferrywatermill.PublisherConfig{Connected: func() error { return down }})
	var c ferrybroker.Connectivity = p
	require.False(t, c.Connected())
	require.ErrorContains(t, c.Disconnected(), "unreachable")
	for _, r := range p.Publish(context.Background(), events("a")) {
		require.True(t, r.NotSent())
	}
	require.Empty(t, f.got)
	down = nil
	require.True(t, c.Connected())
	require.Equal(t, ferrytype.OutcomeConfirmed, p.Publish(context.Background(), events("a"))[0].Outcome)
}

// A payload wrapped by the OutboxPublisher comes out as the bytes that went
// in, on the relay's side (Message) and the consumer's (Delivery); one that
// does not unwrap is an error, malformed for a consumer.
func TestWrappedPayloads(t *testing.T) {
	m := &ferrytype.Message{ID: "e1", Type: "T", Destination: "d", Payload: []byte(`"AAEC/w=="`),
		Headers: map[string]string{ferrywatermill.MetadataPayloadEncoding: ferrywatermill.PayloadBase64}}
	msg, err := ferrywatermill.Message(m)
	require.NoError(t, err)
	require.Equal(t, []byte{0, 1, 2, 255}, []byte(msg.Payload))
	require.Empty(t, msg.Metadata.Get(ferrywatermill.MetadataPayloadEncoding))

	in := message.NewMessage("e1", []byte(`"AAEC/w=="`))
	in.Metadata.Set(ferrywatermill.MetadataPayloadEncoding, ferrywatermill.PayloadBase64)
	d, err := ferrywatermill.Delivery("d", in)
	require.NoError(t, err)
	require.Equal(t, []byte{0, 1, 2, 255}, d.Payload)

	m.Payload = []byte(`{"not":"a string"}`)
	_, err = ferrywatermill.Message(m)
	require.Error(t, err)
	in.Payload = []byte(`"%%%"`)
	_, err = ferrywatermill.Delivery("d", in)
	require.ErrorIs(t, err, ferrybroker.ErrMalformed)
}

func TestConsumerAndRouterConfigs(t *testing.T) {
	h := func(context.Context, *ferrybroker.Delivery) error { return nil }
	_, err := ferrywatermill.NewConsumer(nil, h, &ferrywatermill.ConsumerConfig{Topic: "t"})
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	_, err = ferrywatermill.NewRouterHandler(h, &ferrywatermill.RouterConfig{Topic: "t"})
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	require.ErrorContains(t, err, "poison messages must go somewhere")
	_, err = ferrywatermill.NewRouterHandler(h, &ferrywatermill.RouterConfig{Park: &fakePub{}, ParkTopic: "p"})
	require.ErrorContains(t, err, "Topic is required")
}

package cloudevents_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	cenats "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrycloudevents"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// A relay publishes the outbox's events to JetStream with the CloudEvents
// Encoding; a consumer made of the SDK's JetStream binding alone (its
// Consumer on the test's stream) receives each once, reads it in the
// relay's content mode, and finds a valid CloudEvent with ferry's mapping.
func TestNATSRelayToSDKConsumer(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			ctx := testsvc.Context(t, waitLong)
			nc := testsvc.NATS(t)
			stream, prefix := testsvc.JetStreamStream(t, nc)
			subject := prefix + ".orders"
			o := newOutbox(t)
			want := o.enqueue(t, subject, 4)
			pub, err := ferrynats.New(ctx, nc, &ferrynats.Config{Stream: stream, Encoding: encoding(t, mode)})
			require.NoError(t, err)
			o.relay(t, pub, len(want))

			c, err := cenats.NewConsumerFromConn(nc, stream, subject, nil,
				[]nats.SubOpt{nats.BindStream(stream), nats.DeliverAll(), nats.AckExplicit()})
			require.NoError(t, err)
			got := receiveOpened(t, ctx, c, len(want))
			checkReceived(t, got, want, mode)
		})
	}
}

// opener is an SDK receiver that receives while OpenInbound runs.
type opener interface {
	OpenInbound(ctx context.Context) error
	Receive(ctx context.Context) (binding.Message, error)
	Close(ctx context.Context) error
}

// receiveOpened runs c's OpenInbound while it takes n messages from it,
// then closes it.
func receiveOpened(t *testing.T, ctx context.Context, c opener, n int) []received {
	t.Helper()
	octx, cancel := context.WithCancel(ctx)
	opened := make(chan error, 1)
	go func() { opened <- c.OpenInbound(octx) }()
	got := receiveSDK(t, ctx, c, n)
	cancel()
	select {
	case err := <-opened:
		require.NoError(t, err, "OpenInbound")
	case <-time.After(30 * time.Second):
		t.Fatal("the SDK's OpenInbound did not return once cancelled")
	}
	require.NoError(t, c.Close(context.Background()))
	return got
}

// The SDK's JetStream Sender writes events of another service, in binary
// and in structured mode (which it writes with no header at all: the body
// is the JSON envelope); one of them twice, as a producer retrying. ferry's
// JetStream consumer reads them with the Decoding and its handler applies
// each through the Inbox once: the copy of the CloudEvent with the same id,
// and the redelivery of one whose ack was lost, are duplicates.
func TestNATSSDKProducerToInbox(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			ctx := testsvc.Context(t, waitLong)
			nc := testsvc.NATS(t)
			stream, prefix := testsvc.JetStreamStream(t, nc)
			subject := prefix + ".billing"
			b := newInbox(t)
			events := sdkEvents(t, 3)

			s, err := cenats.NewSenderFromConn(nc, stream, subject, nil)
			require.NoError(t, err)
			for _, e := range append(events, events[0]) {
				require.NoError(t, s.Send(forceMode(ctx, mode), binding.ToMessage(&e)))
			}
			require.NoError(t, s.Close(ctx))
			msgs := testsvc.ReadStream(t, nc, stream, 4, waitLong)
			require.Len(t, msgs, 4)
			if mode == ferrycloudevents.Structured {
				require.Empty(t, msgs[0].Header, "the SDK writes structured mode with no header")
				require.True(t, bytes.Contains(msgs[0].Data, []byte(`"specversion":"1.0"`)), "%s", msgs[0].Data)
			} else {
				require.Equal(t, events[0].ID(), msgs[0].Header.Get("ce-id"))
			}

			b.loseAckOf(events[1].ID())
			js, err := jetstream.New(nc)
			require.NoError(t, err)
			c, err := ferrynats.NewConsumer(js, b.handler(orderOfPayload), &ferrynats.ConsumerConfig{
				Stream: stream, Durable: testsvc.Name("ce_"), FilterSubjects: []string{subject}, Declare: true,
				ParkSubject: prefix + ".parked", AckWait: 30 * time.Second,
				ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 2, Decoding: ferrycloudevents.Decoding{},
					Redelivery: ferrybroker.RedeliveryPolicy{RetryDelay: 20 * time.Millisecond}},
			})
			require.NoError(t, err)
			require.NoError(t, c.Start(ctx))
			t.Cleanup(func() { _ = c.Stop(context.Background()) })

			b.wait(t, 3, 2, c.Stats, 4)
			require.NoError(t, c.Stop(ctx))
			b.checkApplied(t, wantOrders(t, events))
			b.checkDecoded(t, events, true)
		})
	}
}

package cloudevents_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	cekafka "github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferrycloudevents"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// saramaConfig is the configuration of the SDK's sarama clients on kfake.
func saramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "cloudevents-sdk"
	cfg.Version = sarama.V2_8_0_0
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
	return cfg
}

// newKafkaConsumer returns a ferrykafka consumer of topic on the cluster
// at seeds, reading CloudEvents, stopped when the test ends.
func newKafkaConsumer(t *testing.T, seeds []string, topic string, h ferrybroker.Handler) *ferrykafka.Consumer {
	t.Helper()
	park := testsvc.KafkaTopic(t, seeds, 1)
	c, err := ferrykafka.NewConsumer([]kgo.Opt{kgo.SeedBrokers(seeds...)}, h, &ferrykafka.ConsumerConfig{
		Group: testsvc.Name("ce-"), Topics: []string{topic}, ParkTopic: park,
		CommitInterval: 50 * time.Millisecond, RevokeTimeout: 3 * time.Second,
		ClientOpts: []kgo.Opt{kgo.FetchMaxWait(200 * time.Millisecond), kgo.MetadataMinAge(100 * time.Millisecond)},
		ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 2, Decoding: ferrycloudevents.Decoding{},
			Redelivery: ferrybroker.RedeliveryPolicy{RetryDelay: 20 * time.Millisecond}},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

// A relay publishes the outbox's events to Kafka (kfake) with the
// CloudEvents Encoding; the SDK's sarama binding (its consumer-group
// Consumer, sarama speaking to kfake) receives each once, reads it in the
// relay's content mode, and finds a valid CloudEvent with ferry's mapping.
func TestKafkaRelayToSDKConsumer(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			ctx := testsvc.Context(t, waitLong)
			k := testsvc.NewKafka(t)
			topic := testsvc.KafkaTopic(t, k.Seeds, 2)
			o := newOutbox(t)
			want := o.enqueue(t, topic, 4)
			pub, err := ferrykafka.Dial(ctx, "kafka://"+strings.Join(k.Seeds, ","),
				&ferrykafka.Config{Topics: []string{topic}, Encoding: encoding(t, mode)})
			require.NoError(t, err)
			o.relay(t, pub, len(want))

			c, err := cekafka.NewConsumer(k.Seeds, saramaConfig(), testsvc.Name("sdk-"), topic)
			require.NoError(t, err)
			got := receiveOpened(t, ctx, c, len(want))
			checkReceived(t, got, want, mode)
		})
	}
}

// The SDK's sarama Sender writes events of another service to kfake, in
// binary and in structured mode, one of them twice. ferry's Kafka consumer
// reads them with the Decoding and its handler applies each through the
// Inbox once: the copy of the CloudEvent with the same id, and the
// redelivery of one whose ack was lost, are duplicates.
func TestKafkaSDKProducerToInbox(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			ctx := testsvc.Context(t, waitLong)
			k := testsvc.NewKafka(t)
			topic := testsvc.KafkaTopic(t, k.Seeds, 2)
			events := sdkEvents(t, 3)
			b := newInbox(t)

			s, err := cekafka.NewSender(k.Seeds, saramaConfig(), topic)
			require.NoError(t, err)
			for _, e := range append(events, events[0]) {
				require.NoError(t, s.Send(forceMode(ctx, mode), binding.ToMessage(&e)))
			}
			require.NoError(t, s.Close(ctx))
			recs := testsvc.ReadKafka(t, k.Seeds, topic, 4, waitLong)
			require.Len(t, recs, 4)
			ct := ""
			for _, h := range recs[0].Headers {
				if h.Key == "content-type" {
					ct = string(h.Value)
				}
			}
			if mode == ferrycloudevents.Structured {
				require.Equal(t, "application/cloudevents+json", ct)
			} else {
				require.Equal(t, "application/json", ct)
			}

			b.loseAckOf(events[1].ID())
			c := newKafkaConsumer(t, k.Seeds, topic, b.handler(orderOfPayload))
			require.NoError(t, c.Start(ctx))
			b.wait(t, 3, 2, c.Stats, 4)
			require.NoError(t, c.Stop(ctx))
			b.checkApplied(t, wantOrders(t, events))
			b.checkDecoded(t, events, true)
		})
	}
}

package ferrywatermill_test

import (
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker/ferrybrokertest"
	"github.com/ferrydev/ferry/ferrywatermill"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// Kafka through watermill-kafka's synchronous publisher (Sarama) with
// acks=all: Stored. The brokers are an in-process kfake cluster, cut off
// by its listeners. Sarama resends inside one SendMessage, so an error may
// follow a stored record: unknown, as the suite requires of a cut.
func TestPublisherConformanceKafka(t *testing.T) {
	t.Parallel()
	ferrybrokertest.Exercise(t, ferrybrokertest.Harness{
		New: func(t *testing.T) ferrybrokertest.Setup {
			k := testsvc.NewKafka(t)
			topic := testsvc.KafkaTopic(t, k.Seeds, 3)
			cfg := kafka.DefaultSaramaSyncPublisherConfig()
			cfg.Producer.RequiredAcks = sarama.WaitForAll
			cfg.Producer.Retry.Max = 2
			cfg.Producer.Retry.Backoff = 50 * time.Millisecond
			cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
			cfg.Net.DialTimeout = time.Second
			pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: k.Seeds, Marshaler: kafka.DefaultMarshaler{},
				OverwriteSaramaConfig: cfg}, watermill.NopLogger{})
			require.NoError(t, err)
			return ferrybrokertest.Setup{
				Publisher:    ferryPublisher(t, pub, ferrywatermill.Stored),
				Route:        topic,
				NoUnroutable: "watermill-kafka reports a missing topic as an error like any other: unknown, never confirmed, but not told apart as unroutable",
				Receive: func(t *testing.T, want int, d time.Duration) []ferrybrokertest.Received {
					// The reader needs the brokers that Break cut off;
					// the publish it read after has returned.
					k.Restore()
					var out []ferrybrokertest.Received
					for _, r := range testsvc.ReadKafka(t, k.Seeds, topic, want, d) {
						h := map[string]string{}
						for _, x := range r.Headers {
							h[x.Key] = string(x.Value)
						}
						out = append(out, ferrybrokertest.Received{ID: h[kafka.UUIDHeaderKey], Route: r.Topic, Payload: r.Value, Headers: h})
					}
					return out
				},
				Break: func(t *testing.T) {
					// A cut racing a publish comes once records have
					// landed, so that the suite checks confirmed
					// messages as well as unknown ones.
					if strings.HasSuffix(t.Name(), "/BreakDuringPublishConfirmsOnlyStoredMessages") {
						testsvc.WaitKafkaRecords(t, k.Seeds, topic, 1, 10*time.Second)
					}
					k.Cut()
				},
			}
		},
		NoConnectivity: "watermill-kafka's publisher has no connectivity signal",
	})
}

package ferrykafka_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// benchPayload is a 1 KiB JSON payload.
var benchPayload = json.RawMessage(`{"orderId":42,"pad":"` + strings.Repeat("x", 1000) + `"}`)

const benchBatch = 100 // the relay's default batch

// BenchmarkPublish compares, in one run and on the same three-broker
// kfake cluster, ferrykafka's Publisher against a bare franz-go client
// producing the same records (key, value and headers as the Publisher
// builds them, built in the timed loop as the Publisher builds its own)
// with the same client options, one batch of 100 at a time (ProduceSync),
// alternating batch for batch:
//
//	go test -run '^$' -bench Publish -benchtime 200x ./ferrybroker/ferrykafka/
//
// It reports ferry-ev/s, raw-ev/s and ferry/raw, their ratio. kfake is an
// in-process fake sharing the benchmark's cores: the figures compare the
// two clients, they do not measure Kafka.
func BenchmarkPublish(b *testing.B) {
	k := testsvc.NewKafka(b)
	topic := testsvc.KafkaTopic(b, k.Seeds, 6)
	ctx := testsvc.Context(b, 10*time.Minute)
	p, err := ferrykafka.Dial(ctx, seedURL(k.Seeds), &ferrykafka.Config{Topics: []string{topic}})
	require.NoError(b, err)
	defer p.Close()
	// The options Dial gives its client.
	raw, err := kgo.NewClient(kgo.SeedBrokers(k.Seeds...), kgo.ClientID("ferry-relay"), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0), kgo.ProduceRequestTimeout(10*time.Second), kgo.RecordDeliveryTimeout(time.Minute),
		kgo.MaxBufferedRecords(10000), kgo.StopProducerOnDataLossDetected(), kgo.MetadataMinAge(time.Second))
	require.NoError(b, err)
	defer raw.Close()

	batches := func(n int) [][]ferrytype.Message {
		out := make([][]ferrytype.Message, n)
		prefix := testsvc.Name("bench-")
		for j := range out {
			out[j] = make([]ferrytype.Message, benchBatch)
			for i := range out[j] {
				seq := j*benchBatch + i
				out[j][i] = ferrytype.Message{ID: fmt.Sprintf("%s-%d", prefix, seq), AggregateType: "order",
					AggregateID: fmt.Sprint(seq % 2000), Sequence: int64(seq/2000 + 1), Type: "OrderPaid", Payload: benchPayload,
					Destination: topic, Attempt: 1, CreatedAt: time.Now(),
					Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
			}
		}
		return out
	}
	records := func(msgs []ferrytype.Message) []*kgo.Record {
		out := make([]*kgo.Record, len(msgs))
		for i := range msgs {
			m := &msgs[i]
			r := &kgo.Record{Topic: m.Destination, Key: []byte(m.AggregateID), Value: m.Payload}
			keys := make([]string, 0, len(m.Headers))
			for k := range m.Headers {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(m.Headers[k])})
			}
			for _, kv := range ferrybroker.MetadataHeaders(m) {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: kv[0], Value: []byte(kv[1])})
			}
			out[i] = r
		}
		return out
	}
	// Warm both clients up: metadata, connections, producer ids.
	requireAll(b, ferrytype.OutcomeConfirmed, p.Publish(ctx, batches(1)[0]))
	require.NoError(b, raw.ProduceSync(ctx, records(batches(1)[0])...).FirstErr())

	ferryBatches, rawBatches := batches(b.N), batches(b.N)
	var ferryTime, rawTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		for j, r := range p.Publish(ctx, ferryBatches[i]) {
			if r.Outcome != ferrytype.OutcomeConfirmed {
				b.Fatalf("batch %d message %d: %s: %v", i, j, r.Outcome, r.Err)
			}
		}
		ferryTime += time.Since(start)
		start = time.Now()
		if err := raw.ProduceSync(ctx, records(rawBatches[i])...).FirstErr(); err != nil {
			b.Fatalf("raw batch %d: %v", i, err)
		}
		rawTime += time.Since(start)
	}
	b.StopTimer()
	events := float64(b.N * benchBatch)
	ferryRate, rawRate := events/ferryTime.Seconds(), events/rawTime.Seconds()
	b.ReportMetric(ferryRate, "ferry-ev/s")
	b.ReportMetric(rawRate, "raw-ev/s")
	b.ReportMetric(ferryRate/rawRate, "ferry/raw")
	b.ReportMetric(0, "ns/op")
}

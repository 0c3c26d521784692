package ferrycloudevents_test

import (
	"testing"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrycloudevents"
)

// BenchmarkEncode writes one event as a Kafka record in ferry's form, and
// as a CloudEvent in binary and structured mode: what the encoding costs
// a publish beside ferry's own form (go test -bench Encode -benchmem).
func BenchmarkEncode(b *testing.B) {
	m := message()
	b.Run("ferry", func(b *testing.B) {
		for b.Loop() {
			_ = ferrybroker.FerryForm(&m, ferrybroker.ProtocolKafka)
		}
	})
	for _, mode := range []ferrycloudevents.Mode{ferrycloudevents.Binary, ferrycloudevents.Structured} {
		enc, err := ferrycloudevents.NewEncoding(ferrycloudevents.Config{Source: "/orders-service", Mode: mode})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(string(mode), func(b *testing.B) {
			for b.Loop() {
				if _, err := enc.Encode(&m, ferrybroker.ProtocolKafka); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	d := ferrybroker.Delivery{}
	enc, _ := ferrycloudevents.NewEncoding(ferrycloudevents.Config{Source: "/orders-service"})
	e, _ := enc.Encode(&m, ferrybroker.ProtocolKafka)
	b.Run("decode-binary", func(b *testing.B) {
		for b.Loop() {
			d = ferrybroker.Delivery{Payload: e.Body, Headers: make(map[string]string, len(e.Headers))}
			for _, kv := range e.Headers {
				d.Headers[kv[0]] = kv[1]
			}
			if _, err := (ferrycloudevents.Decoding{}).Decode(&d, "application/json", ferrybroker.ProtocolKafka); err != nil {
				b.Fatal(err)
			}
		}
	})
}

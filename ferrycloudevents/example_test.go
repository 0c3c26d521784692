package ferrycloudevents_test

import (
	"fmt"
	"time"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrycloudevents"
	"github.com/ferrydev/ferry/ferrytype"
)

// A publisher writes ferry's events as CloudEvents when its config's
// Encoding is one (ferryamqp.Config, ferrynats.Config, ferrykafka.Config:
// Encoding: enc). Here, the Kafka record an event becomes.
func ExampleNewEncoding() {
	enc, err := ferrycloudevents.NewEncoding(ferrycloudevents.Config{Source: "/orders-service"})
	if err != nil {
		panic(err)
	}
	m := ferrytype.Message{ID: "0190c9f2-7d1e-7c3a-9a51-5b2f0e8d4c11", Type: "OrderPaid",
		AggregateType: "order", AggregateID: "o-42", Sequence: 3, Payload: []byte(`{"amount":1250}`),
		CreatedAt: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)}
	rec, err := enc.Encode(&m, ferrybroker.ProtocolKafka)
	if err != nil {
		panic(err)
	}
	for _, h := range rec.Headers {
		fmt.Printf("%s: %s\n", h[0], h[1])
	}
	fmt.Printf("value: %s\n", rec.Body)
	// Output:
	// ce_id: 0190c9f2-7d1e-7c3a-9a51-5b2f0e8d4c11
	// ce_source: /orders-service
	// ce_specversion: 1.0
	// ce_type: OrderPaid
	// content-type: application/json
	// ce_subject: o-42
	// ce_time: 2026-12-07T10:00:00Z
	// ce_ferryaggregatetype: order
	// ce_ferrysequence: 3
	// value: {"amount":1250}
}

// A consumer reads CloudEvents, those of other producers among them, when
// its options' Decoding is one (ferrybroker.ConsumerOptions.Decoding): the
// inbox then deduplicates by the CloudEvent's id. Here, a structured
// CloudEvent that a service in another language published to NATS.
func ExampleDecoding() {
	d := &ferrybroker.Delivery{
		Route:   "payments.settled",
		Headers: map[string]string{"Content-Type": "application/cloudevents+json"},
		Payload: []byte(`{"specversion":"1.0","id":"pay-981","source":"https://billing.example.com",
			"type":"com.example.payment.settled","subject":"o-42","data":{"amount":1250}}`),
	}
	ct, err := ferrycloudevents.Decoding{}.Decode(d, d.Headers["Content-Type"], ferrybroker.ProtocolNATS)
	if err != nil {
		panic(err)
	}
	fmt.Println(d.MessageID, d.Type, d.AggregateID, d.Headers["source"])
	fmt.Printf("%s %s\n", ct, d.Payload)
	// Output:
	// pay-981 com.example.payment.settled o-42 https://billing.example.com
	// application/json {"amount":1250}
}

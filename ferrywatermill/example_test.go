package ferrywatermill_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrystore/ferrymem"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/ferrywatermill"
)

// A relay's events published through a Watermill publisher: here Watermill's
// in-memory GoChannel, which hands messages over without a broker's
// confirmation (HandedOff); watermill-amqp with ConfirmDelivery or
// watermill-redisstream would be Stored.
func ExampleNewPublisher() {
	pubsub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	msgs, _ := pubsub.Subscribe(context.Background(), "orders")

	p, err := ferrywatermill.NewPublisher(pubsub, &ferrywatermill.PublisherConfig{
		Guarantee: ferrywatermill.HandedOff,
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	res := p.Publish(context.Background(), []ferrytype.Message{{
		ID: "evt-1", Type: "OrderPaid", AggregateType: "order", AggregateID: "42", Sequence: 1,
		Destination: "orders", Payload: []byte(`{"order":42}`),
	}})
	fmt.Println(res[0].Outcome)
	msg := <-msgs
	msg.Ack()
	fmt.Println(msg.UUID, msg.Metadata.Get(ferrybroker.HeaderEventType), msg.Metadata.Get(ferrybroker.HeaderSequence), string(msg.Payload))
	// Output:
	// confirmed
	// evt-1 OrderPaid 1 {"order":42}
}

// A consumed Watermill message as a ferry handler sees it.
func ExampleDelivery() {
	msg := message.NewMessage("evt-1", []byte(`{"order":42}`))
	msg.Metadata.Set(ferrybroker.HeaderEventType, "OrderPaid")
	msg.Metadata.Set(ferrybroker.HeaderAggregateType, "order")
	msg.Metadata.Set(ferrybroker.HeaderAggregateID, "42")
	msg.Metadata.Set(ferrybroker.HeaderSequence, "3")
	d, err := ferrywatermill.Delivery("orders", msg)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(d.MessageID, d.Type, d.AggregateType, d.AggregateID, d.Sequence, d.Route)
	// Output: evt-1 OrderPaid order 42 3 orders
}

// A message a Watermill application publishes through the OutboxPublisher,
// as the event written to the outbox.
func ExampleEvent() {
	msg := message.NewMessage("0190c7e0-0000-7000-8000-000000000001", []byte(`{"order":42}`))
	msg.Metadata.Set("name", "OrderPaid") // Watermill CQRS names events here
	msg.Metadata.Set(ferrybroker.HeaderAggregateType, "order")
	msg.Metadata.Set(ferrybroker.HeaderAggregateID, "42")
	msg.Metadata.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	ev := ferrywatermill.Event("orders", msg)
	fmt.Println(ev.ID, ev.Type, ev.AggregateType, ev.AggregateID, ev.Destination, len(ev.Headers))
	// Output: 0190c7e0-0000-7000-8000-000000000001 OrderPaid order 42 orders 2
}

// One message for two topics, through the OutboxPublisher. A message's UUID
// is its event id, the outbox's key, and message.Copy keeps it: the copy for
// the second topic would be refused (ferrytype.ErrDuplicate). So the copy
// gets a UUID of its own — here an empty one, which takes the id the outbox
// generates — and carries the original UUID in its metadata. The outbox is
// ferrymem's; the relay delivers both events through a Watermill GoChannel.
func ExampleOutboxPublisher_Publish_copyPerTopic() {
	ctx := context.Background()
	db := ferrymem.NewDB(nil)
	store, err := ferrymem.New(db, nil)
	if err != nil {
		panic(err)
	}
	outbox, err := ferry.NewOutbox(store, nil)
	if err != nil {
		panic(err)
	}

	tx, err := db.Begin(ctx)
	if err != nil {
		panic(err)
	}
	pub, err := ferrywatermill.NewOutboxPublisher(outbox, tx, nil)
	if err != nil {
		panic(err)
	}
	msg := message.NewMessage("0190c7e0-0000-7000-8000-000000000001", []byte(`{"order":42}`))
	cp := msg.Copy()
	cp.UUID = "" // or watermill.NewUUID(): anything but msg.UUID
	cp.Metadata.Set("original_uuid", msg.UUID)
	err = pub.Publish("orders", msg)
	if err == nil {
		err = pub.Publish("invoices", cp) // cp.UUID is now the outbox's id
	}
	if err != nil {
		_ = tx.Rollback() // as after any Publish error
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	pubsub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	orders, _ := pubsub.Subscribe(ctx, "orders")
	invoices, _ := pubsub.Subscribe(ctx, "invoices")
	p, err := ferrywatermill.NewPublisher(pubsub, &ferrywatermill.PublisherConfig{
		Guarantee: ferrywatermill.HandedOff,
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	relay, err := ferry.NewRelay(store, p, &ferry.RelayConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	if _, err := relay.Drain(ctx); err != nil {
		panic(err)
	}
	o, i := <-orders, <-invoices
	o.Ack()
	i.Ack()
	fmt.Println("orders:", o.UUID, string(o.Payload))
	fmt.Println("invoices: a UUID of its own:", i.UUID == cp.UUID && i.UUID != o.UUID, string(i.Payload))
	fmt.Println("invoices: original_uuid", i.Metadata.Get("original_uuid"))
	// Output:
	// orders: 0190c7e0-0000-7000-8000-000000000001 {"order":42}
	// invoices: a UUID of its own: true {"order":42}
	// invoices: original_uuid 0190c7e0-0000-7000-8000-000000000001
}

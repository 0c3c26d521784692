package ferrykafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
)

// Publishing two events: one to a topic that exists, confirmed once every
// in-sync replica has it; one to a topic that does not, unroutable. The
// brokers are an in-process kfake cluster here; in production the URL
// names real ones (kafkas://user:password@b1:9093,b2:9093?sasl=scram-sha-512).
func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(3, "orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	ctx := context.Background()
	pub, err := ferrykafka.Dial(ctx, "kafka://"+strings.Join(cluster.ListenAddrs(), ","),
		&ferrykafka.Config{Topics: []string{"orders"}})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	res := pub.Publish(ctx, []ferrytype.Message{
		{ID: "evt-1", AggregateType: "order", AggregateID: "42", Sequence: 1, Type: "OrderPaid",
			Payload: []byte(`{"orderId":42}`), Destination: "orders"},
		{ID: "evt-2", AggregateType: "order", AggregateID: "43", Sequence: 1, Type: "OrderPaid",
			Payload: []byte(`{"orderId":43}`), Destination: "payments"},
	})
	for _, r := range res {
		fmt.Println(r.Outcome, r.Err)
	}
	// Output:
	// confirmed <nil>
	// returned unroutable: Kafka topic "payments" does not exist: UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition.
}

// The outbox pattern end to end: an event enqueued in a SQLite
// transaction, published by a relay to Kafka (kfake, in-process), read back
// with its key (the aggregate id) and ferry's headers.
func Example_relay() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ferrykafka-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := ferrysqlite.Open(ctx, "sqlite://"+filepath.Join(dir, "app.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	outbox, err := ferry.NewOutbox(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	tx, err := store.DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	// No destination: the topic is derived from the aggregate type.
	if _, err := outbox.EnqueueTx(ctx, tx, ferry.Event{ID: "evt-1", AggregateType: "order", AggregateID: "42",
		Type: "OrderPaid", Payload: json.RawMessage(`{"orderId":42}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	cluster, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	url := "kafka://" + strings.Join(cluster.ListenAddrs(), ",")
	pub, err := ferrykafka.Dial(ctx, url, &ferrykafka.Config{
		TopicFrom: ferrykafka.TopicFromAggregateType, TopicPrefix: "shop.",
		Topics: []string{"shop.order"}, Declare: true, Partitions: 6,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	relay, err := ferry.NewRelay(store, pub, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := relay.Drain(ctx); err != nil {
		log.Fatal(err)
	}

	cc, err := ferrykafka.ParseURL(url)
	if err != nil {
		log.Fatal(err)
	}
	consumer, err := kgo.NewClient(append(cc.Opts(), kgo.ConsumeTopics("shop.order"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	r := consumer.PollRecords(ctx, 1).Records()[0]
	fmt.Printf("topic %s key %s value %s\n", r.Topic, r.Key, r.Value)
	for _, h := range r.Headers {
		if h.Key == ferrybroker.HeaderEventID || h.Key == ferrybroker.HeaderSequence {
			fmt.Printf("%s: %s\n", h.Key, h.Value)
		}
	}
	// Output:
	// topic shop.order key 42 value {"orderId":42}
	// Ferry-Event-Id: evt-1
	// Ferry-Aggregate-Seq: 1
}

// ParseURL reads a URL into the franz-go options it stands for; String
// shows it without the password.
func ExampleParseURL() {
	cc, err := ferrykafka.ParseURL("kafkas://relay:s3cret@b1:9093,b2?sasl=scram-sha-512&client_id=orders-relay")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cc.Seeds, cc.SASL, cc.TLS != nil)
	fmt.Println(cc)
	cl, err := kgo.NewClient(cc.Opts()...) // plus any option of your own
	if err != nil {
		log.Fatal(err)
	}
	cl.Close()
	// Output:
	// [b1:9093 b2:9092] scram-sha-512 true
	// kafkas://relay:xxxxx@b1:9093,b2:9092?client_id=orders-relay&sasl=scram-sha-512
}

// Consuming: a consumer group member runs the handler on each record, a
// partition's records in order; a poison record goes to the park topic,
// and a record counts as settled once the offset past it is committed.
func ExampleConsumer() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders", "orders.parked"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	ctx := context.Background()
	url := "kafka://" + strings.Join(cluster.ListenAddrs(), ",")
	pub, err := ferrykafka.Dial(ctx, url, &ferrykafka.Config{Topics: []string{"orders"}})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	pub.Publish(ctx, []ferrytype.Message{
		{ID: "evt-1", AggregateType: "order", AggregateID: "42", Sequence: 1, Type: "OrderPaid",
			Payload: []byte(`{"orderId":42,"currency":"EUR"}`), Destination: "orders"},
		{ID: "evt-2", AggregateType: "order", AggregateID: "42", Sequence: 2, Type: "OrderRefunded",
			Payload: []byte(`{"orderId":42,"currency":"XXX"}`), Destination: "orders"},
	})

	settled := make(chan string, 2)
	c, err := ferrykafka.DialConsumer(ctx, url, func(ctx context.Context, d *ferrybroker.Delivery) error {
		var p struct{ Currency string }
		if err := json.Unmarshal(d.Payload, &p); err != nil {
			return ferrytype.Poison(err)
		}
		if p.Currency != "EUR" {
			return ferrytype.Poison(fmt.Errorf("unknown currency %s", p.Currency))
		}
		fmt.Println("handled", d.Type, d.MessageID, "of", d.AggregateType, d.AggregateID)
		return nil // an inbox transaction would commit the effect here
	}, &ferrykafka.ConsumerConfig{
		Group: "points", Topics: []string{"orders"}, ParkTopic: "orders.parked",
		ConsumerOptions: ferrybroker.ConsumerOptions{
			Hooks: []ferrybroker.Hook{ferrybroker.SettledFunc(func(_ string, d *ferrybroker.Delivery, s ferrybroker.Settlement) {
				settled <- fmt.Sprint(d.MessageID, " ", s.Action)
			})},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-settled)
	fmt.Println(<-settled)
	if err := c.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// handled OrderPaid evt-1 of order 42
	// evt-1 acked
	// evt-2 parked
}

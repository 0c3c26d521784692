package ferryamqp_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
)

// A relay publishing a MariaDB outbox to RabbitMQ: the publisher declares
// a quorum queue bound to amq.topic (and its parking queue) and publishes
// each event with a confirm. Needs MariaDB and RabbitMQ, so it is not run.
func Example_relay() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	store, err := ferrymysql.Open(ctx, "mysql://app:secret@127.0.0.1:3306/shop", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	pub, err := ferryamqp.Dial(ctx, "amqp://ferry:secret@127.0.0.1:5672/", &ferryamqp.Config{
		Declare: true,
		Topology: ferryamqp.Topology{
			Queues:   []ferryamqp.Queue{{Name: "points"}},
			Bindings: []ferryamqp.Binding{{Queue: "points", RoutingKey: "orders.*.paid"}},
		},
	})
	if err != nil {
		log.Fatal(err) // e.g. "queue points exists with other settings ..."
	}
	defer pub.Close()
	relay, err := ferry.NewRelay(store, pub, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

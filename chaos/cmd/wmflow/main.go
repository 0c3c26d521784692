// Command wmflow runs one process of the chaos suite's side-by-side
// comparison of Watermill's outbox (watermill-sql, the forwarder, the
// deduplicator middleware) with ferry's bridge (ferrywatermill): the
// forwarder or ferry's relay, or a Watermill router awarding points
// either way. The suite (chaos.RunWatermill) starts, kills and restarts
// these processes.
//
//	wmflow forward --db DSN --amqp URL --topic T
//	wmflow relay   --db DSN --amqp URL --table OUTBOX
//	wmflow consume --mode watermill|ferry --db DSN --amqp URL --queue Q --effects TABLE [--inbox MARKERS]
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	_ "github.com/go-sql-driver/mysql"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/chaos/wmflow"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrywatermill"
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: wmflow forward|relay|consume [flags]")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dsn := fs.String("db", "", "MariaDB DSN (go-sql-driver form)")
	amqpURL := fs.String("amqp", "", "RabbitMQ URL")
	topic := fs.String("topic", "", "the forwarder's topic")
	table := fs.String("table", "", "ferry's outbox table")
	mode := fs.String("mode", "", "watermill or ferry")
	queue := fs.String("queue", "", "the queue consumed")
	effects := fs.String("effects", "", "the effects table")
	inbox := fs.String("inbox", "", "ferry's inbox marker table (its conflict and version tables take _c and _v)")
	_ = fs.Parse(os.Args[2:])

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	db, err := sql.Open("mysql", *dsn)
	check(err)
	defer db.Close()
	logger := watermill.NewStdLogger(false, false)
	amqpCfg := wamqp.NewDurableQueueConfig(*amqpURL)
	amqpCfg.Publish.ConfirmDelivery = true
	amqpCfg.Publish.ChannelPoolSize = 8
	amqpCfg.Connection.Reconnect = &wamqp.ReconnectConfig{BackoffInitialInterval: 50 * time.Millisecond,
		BackoffRandomizationFactor: 0.2, BackoffMultiplier: 2, BackoffMaxInterval: 500 * time.Millisecond}

	switch os.Args[1] {
	case "forward":
		sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(db), wmflow.SQLSubscriberConfig(), logger)
		check(err)
		pub, err := wamqp.NewPublisher(amqpCfg, logger)
		check(err)
		fwd, err := forwarder.NewForwarder(sub, pub, logger, forwarder.Config{ForwarderTopic: *topic})
		check(err)
		check(fwd.Run(ctx))
	case "relay":
		store, err := ferrymysql.New(db, &ferrymysql.Config{Table: *table})
		check(err)
		wpub, err := wamqp.NewPublisher(amqpCfg, logger)
		check(err)
		pub, err := ferrywatermill.NewPublisher(wpub, &ferrywatermill.PublisherConfig{Guarantee: ferrywatermill.Stored})
		check(err)
		relay, err := ferry.NewRelay(store, pub, &ferry.RelayConfig{PollInterval: 50 * time.Millisecond, Lease: 6 * time.Second, PublishTimeout: 3 * time.Second})
		check(err)
		if err := relay.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Fatal(err)
		}
	case "consume":
		sub, err := wamqp.NewSubscriber(amqpCfg, logger)
		check(err)
		router, err := message.NewRouter(message.RouterConfig{}, logger)
		check(err)
		router.AddMiddleware(middleware.Recoverer)
		var h message.NoPublishHandlerFunc
		switch *mode {
		case "watermill":
			// Watermill's way: the deduplicator (in memory, keyed by the
			// message UUID) in front of retries, the effect in a
			// transaction of its own.
			kr, err := middleware.NewMapExpiringKeyRepository(time.Minute)
			check(err)
			dedup := &middleware.Deduplicator{KeyFactory: func(m *message.Message) (string, error) { return m.UUID, nil }, Repository: kr}
			router.AddMiddleware(dedup.Middleware,
				middleware.Retry{MaxRetries: 3, InitialInterval: 100 * time.Millisecond, Logger: logger}.Middleware)
			h = func(msg *message.Message) error {
				order, err := wmflow.DecodeOrder(msg.Payload)
				if err != nil {
					return err
				}
				_, err = db.ExecContext(msg.Context(), "INSERT INTO "+*effects+" (order_id) VALUES (?)", order)
				return err
			}
		case "ferry":
			store, err := ferrymysql.NewInbox(db, &ferrymysql.InboxConfig{MarkerTable: *inbox, ConflictTable: *inbox + "_c", VersionTable: *inbox + "_v"})
			check(err)
			in, err := ferry.NewInbox(store, &ferry.InboxConfig{Consumer: "points"})
			check(err)
			handler := ferry.InboxHandler(in, func(d *ferrybroker.Delivery) (ferry.Operation, error) {
				order, err := wmflow.DecodeOrder(d.Payload)
				if err != nil {
					return ferry.Operation{}, err
				}
				return ferry.Operation{Key: fmt.Sprintf("order:%d:points", order), Fields: json.RawMessage(d.Payload)}, nil
			}, func(ctx context.Context, tx *sql.Tx, d *ferrybroker.Delivery) error {
				order, _ := wmflow.DecodeOrder(d.Payload)
				_, err := tx.ExecContext(ctx, "INSERT INTO "+*effects+" (order_id) VALUES (?)", order)
				return err
			})
			parkPub, err := wamqp.NewPublisher(amqpCfg, logger)
			check(err)
			rh, err := ferrywatermill.NewRouterHandler(handler, &ferrywatermill.RouterConfig{Topic: *queue, Park: parkPub, ParkTopic: *queue + ".parked",
				Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: 1000, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second}})
			check(err)
			h = rh.Func
		default:
			log.Fatalf("unknown mode %q", *mode)
		}
		router.AddConsumerHandler("points", *queue, sub, h)
		check(router.Run(ctx))
	default:
		log.Fatalf("unknown command %q", os.Args[1])
	}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// Command shop runs ferry's reference shop (examples/shop): one of its
// processes — the order service, the relay, the points consumer or the SMS
// consumer — with fault injection that ferry's own binary does not have, or
// the whole shop as a self-contained demo. The chaos suite builds it and
// runs its roles; the demo runs the same roles, as processes of this
// binary.
//
//	shop demo   [--orders 400] [--rate 400] [--broker-url amqp://USER:PASS@HOST:5672/VHOST | kafka://HOST:9092] [--dir DIR] [--keep] [-v] [-q]
//	shop setup  --orders-db URL --points-db URL
//	shop orders --orders-db URL --first 1 --last 400 --rate 50 [--crash-at order.after-commit:100]
//	shop relay  --database-url URL --broker-url URL [--stream SHOP] [--crash-at relay.after-publish:3] [--lose-confirm-pct 3] [--pause-at relay.after-publish=FILE]
//	shop points --points-db URL --broker-url URL [--crash-at consumer.after-handle:10]
//	shop sms    --points-db URL --broker-url URL --gateway URL [--crash-at inbox.before-commit:10]
//	shop check  --orders-db URL --points-db URL --gateway URL
//
// From a clone of ferry, `go run ./examples/shop/cmd/shop demo`; from
// anywhere, with a released version,
// `go run github.com/ferrydev/ferry/examples/shop/cmd/shop@VERSION demo`. The demo runs the shop on SQLite and an embedded NATS (or Kafka
// brokers of yours), kills each of its four processes once at a crash
// point, starts them again and checks the result (shop.RunDemo).
//
// SIGTERM or SIGINT stops a process cleanly. Exit status: 0 done (the
// demo: its check passed), 1 failed (the demo: its check failed), 2 bad
// role or flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/ferrydev/ferry/examples/shop"
	"github.com/ferrydev/ferry/ferrytype"
)

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args (a role and its flags, or demo and its)
// and returns the exit status. SIGINT and SIGTERM end its context.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if len(args) > 0 && args[0] == "demo" {
		err = demo(ctx, args[1:], stdout, stderr)
	} else {
		err = shop.RunRole(ctx, args, stdout, stderr)
	}
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "shop:", ferrytype.RedactURL(err.Error()))
	if errors.Is(err, shop.ErrUsage) {
		return exitUsage
	}
	return exitFailed
}

// demoAbout is the demo's help text, before its flags.
const demoAbout = `Usage: shop demo [flags]

Runs the reference shop with no setup: SQLite databases and a NATS server
with JetStream inside this process (or, with --broker-url, a RabbitMQ
broker or a Kafka cluster of yours), an SMS gateway on loopback, and four
separate processes — the order service, a relay, a points consumer and an SMS
consumer — each started with a crash point armed:

  order service    killed right after a payment committed
  relay            killed after the broker confirmed a batch, before it was marked SENT
  points consumer  killed after its transaction committed, before the ack
  sms consumer     killed inside its transaction, before the commit

Each killed process is started again. When the orders are placed and
everything is quiet, the checker compares the databases and the gateway with
the ground truth: no paid order lost, none applied twice, nothing applied for
an order that never paid, conflicts and poison parked. It prints what
happened and a verdict, and exits 1 if the check fails.

On RabbitMQ the two consumers swap crash points (the points queue also
takes the OrderCreated events, which it acks without effect, so only the
sms queue's n-th delivery is sure to be a paid order's). The demo declares
quorum queues points and sms, and their
parking queues points.parking and sms.parking, bound to amq.topic; it
refuses queues that still hold messages of an earlier run: give it a vhost
where these names are its own (amqp://guest:guest@localhost:5672/demo,
after rabbitmqctl add_vhost demo and set_permissions -p demo guest '.*'
'.*' '.*').

On Kafka the demo creates the shop's topics where they do not exist
(shop.order.created, shop.order.paid, shop.parked.points, shop.parked.sms,
4 partitions each, one replica) and consumes in the groups "points" and
"sms": give it a cluster where these names are its own.

Flags:
`

// demo parses the demo's flags and runs it (shop.RunDemo), its processes
// being this binary's roles.
func demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o shop.DemoOptions
	var quiet bool
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), demoAbout)
		fs.PrintDefaults()
	}
	fs.IntVar(&o.Orders, "orders", 400, "orders to place")
	fs.IntVar(&o.Rate, "rate", 400, "orders per second")
	fs.BoolVar(&o.Keep, "keep", false, "keep the demo's directory (databases, stream) afterwards")
	fs.StringVar(&o.Dir, "dir", "", "directory for the demo's files (default: a new temporary one)")
	fs.StringVar(&o.BrokerURL, "broker-url", "", "RabbitMQ (amqp://user:pass@host:5672/vhost) or Kafka brokers (kafka://host:9092[,host2:9092]) to run on (default: an embedded NATS)")
	fs.BoolVar(&o.Verbose, "verbose", false, "show the processes' own output")
	fs.BoolVar(&o.Verbose, "v", false, "short for --verbose")
	fs.BoolVar(&quiet, "quiet", false, "print nothing; the exit code tells")
	fs.BoolVar(&quiet, "q", false, "short for --quiet")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: demo: %w", shop.ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: demo: unexpected arguments %q", shop.ErrUsage, fs.Args())
	}
	out := stdout
	if quiet {
		out = io.Discard
	}
	return shop.RunDemo(ctx, out, o)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/examples/shop"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/internal/natsembed"
	"github.com/ferrydev/ferry/internal/open"
)

func newDemo() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the reference shop on SQLite and an embedded NATS, crash each of its processes once, and check the result",
		Long: `Runs the reference system with no setup: SQLite databases and a NATS server
with JetStream inside this process (or, with --broker-url kafka://HOST:PORT,
a Kafka cluster of yours), an SMS gateway on loopback, and four
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

On Kafka the demo creates the shop's topics where they do not exist
(shop.order.created, shop.order.paid, shop.parked.points, shop.parked.sms,
4 partitions each, one replica) and consumes in the groups "points" and
"sms": give it a cluster where these names are its own.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if o.quiet {
				out = io.Discard
			}
			return runDemo(cmd.Context(), out, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.orders, "orders", 400, "orders to place")
	f.IntVar(&o.rate, "rate", 400, "orders per second")
	f.BoolVar(&o.keep, "keep", false, "keep the demo's directory (databases, stream) afterwards")
	f.StringVar(&o.dir, "dir", "", "directory for the demo's files (default: a new temporary one)")
	f.StringVar(&o.brokerURL, "broker-url", "", "Kafka brokers to run on, kafka://host:9092[,host2:9092] (default: an embedded NATS)")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "show the processes' own output")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "print nothing; the exit code tells")
	cmd.AddCommand(newDemoRole())
	return cmd
}

// newDemoRole is the demo's child processes: `ferry demo role relay ...`
// runs a role of the reference shop (shop.RunRole), as the shop's own
// binary does for the chaos suite. Hidden: the demo starts it, people do
// not.
func newDemoRole() *cobra.Command {
	return &cobra.Command{
		Use:                "role <" + strings.Join(shop.Roles, "|") + "> [flags]",
		Short:              "Run one process of the reference shop (started by the demo)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			err := shop.RunRole(cmd.Context(), args, cmd.OutOrStdout(), cmd.ErrOrStderr())
			if errors.Is(err, shop.ErrUsage) {
				return usageError{err}
			}
			return err
		},
	}
}

type demoOptions struct {
	orders, rate   int
	keep           bool
	dir, brokerURL string
	verbose, quiet bool
}

func runDemo(ctx context.Context, out io.Writer, o demoOptions) (err error) {
	if o.orders < 20 || o.rate < 1 {
		return usageError{errors.New("--orders must be at least 20 and --rate positive")}
	}
	if o.brokerURL != "" && !open.IsKafka(o.brokerURL) {
		return usageError{errors.New("--broker-url: the demo runs on kafka:// brokers, or on its embedded NATS without the flag")}
	}
	if o.brokerURL != "" {
		if err := open.ValidateBrokerURL(o.brokerURL); err != nil {
			return usageError{err}
		}
	}
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "ferry-demo-"); err != nil {
			return err
		}
		if !o.keep {
			defer os.RemoveAll(dir)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}

	b, err := startDemoBroker(ctx, dir, o.brokerURL)
	if err != nil {
		return err
	}
	defer b.close()
	gateway := shop.NewGateway(10)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: gateway, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	gatewayURL := "http://" + ln.Addr().String()
	ordersURL := "sqlite://" + filepath.Join(dir, "orders.db")
	pointsURL := "sqlite://" + filepath.Join(dir, "points.db")
	for _, s := range []struct {
		url string
		fn  func(context.Context, *shop.DB) error
	}{{ordersURL, shop.SetupOrders}, {pointsURL, shop.SetupPoints}} {
		db, err := shop.Open(ctx, s.url)
		if err != nil {
			return err
		}
		err = s.fn(ctx, db)
		db.Close()
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "ferry demo: SQLite in %s, %s, SMS gateway %s\n", dir, b.about, gatewayURL)

	bin, err := os.Executable()
	if err != nil {
		return err
	}
	var logw io.Writer = io.Discard
	if o.verbose {
		logw = out
	}
	// The relay is ferry's relay (shop.RunRelay: ferry.NewRelay on the
	// store and publisher `ferry relay` opens), with shorter intervals so
	// that the demo's crash and its recovery take seconds.
	role := []string{"demo", "role"}
	procs := []*shop.Proc{
		{Name: "orders", Args: append(role, "orders", "--orders-db", ordersURL, "--first", "1", "--last", strconv.Itoa(o.orders),
			"--rate", strconv.Itoa(o.rate), "--poison-pct", "2", "--conflict-pct", "2", "--rollback-pct", "5")},
		{Name: "relay", Args: append(append(role, "relay", "--database-url", ordersURL, "--broker-url", b.url,
			"--ordered", "--poll-interval", "50ms", "--lease", "2s", "--publish-timeout", "1500ms", "--retry-initial", "50ms",
			"--sweep-interval", "200ms", "--retry-max", "1s"), b.relayArgs...)},
		{Name: "points", Args: append(role, "points", "--points-db", pointsURL, "--broker-url", b.url)},
		{Name: "sms", Args: append(role, "sms", "--points-db", pointsURL, "--broker-url", b.url, "--gateway", gatewayURL)},
	}
	crashes := map[string]string{
		"orders": shop.FaultOrderAfterCommit + ":" + strconv.Itoa(o.orders/3),
		"relay":  ferry.FaultAfterPublish + ":3",
		"points": ferrybroker.FaultConsumerAfterHandle + ":" + strconv.Itoa(o.orders/4),
		"sms":    ferry.FaultInboxBeforeCommit + ":" + strconv.Itoa(o.orders/5),
	}
	for _, p := range procs {
		p.Bin, p.Log = bin, logw
		if err := p.Start("--crash-at", crashes[p.Name]); err != nil {
			return err
		}
		say("%-6s started, crash point %s armed", p.Name, crashes[p.Name])
	}
	defer func() {
		for _, p := range procs {
			p.Stop(20 * time.Second)
		}
	}()

	// Supervise: restart what the crash points killed, until the orders
	// are placed and nothing is left to do.
	crashed := 0
	ordersDone := false
	quietSince := time.Time{}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo did not settle: %w", ctx.Err())
		case <-tick.C:
		}
		for _, p := range procs {
			if p.Running() {
				continue
			}
			switch {
			case p.Killed():
				crashed++
				say("%-6s killed at its crash point (%s); starting it again", p.Name, crashes[p.Name])
				if err := p.Start(); err != nil {
					return err
				}
			case p.Name == "orders" && !ordersDone:
				ordersDone = true
				say("orders placed: the order service is done")
			case p.Name != "orders":
				return fmt.Errorf("%s exited unexpectedly", p.Name)
			}
		}
		if !ordersDone {
			continue
		}
		quiet, err := demoQuiet(ctx, ordersURL, pointsURL, b)
		if err != nil {
			return err
		}
		switch {
		case !quiet:
			quietSince = time.Time{}
		case quietSince.IsZero():
			quietSince = time.Now()
		case time.Since(quietSince) > 500*time.Millisecond:
			goto settled
		}
	}
settled:
	say("everything delivered; stopping the processes")
	for _, p := range procs {
		p.Stop(20 * time.Second)
	}
	db1, err := shop.Open(ctx, ordersURL)
	if err != nil {
		return err
	}
	defer db1.Close()
	db2, err := shop.Open(ctx, pointsURL)
	if err != nil {
		return err
	}
	defer db2.Close()
	rep, err := shop.Check(ctx, db1, db2, gateway.Stats())
	if err != nil {
		return err
	}
	parked, err := b.parked(ctx)
	if err != nil {
		return err
	}
	total := map[string]shop.Stats{}
	for _, p := range procs {
		total[p.Name] = p.Total()
	}
	absorbed := total["points"].Duplicate + total["sms"].Duplicate
	fmt.Fprintln(out)
	fmt.Fprint(out, rep.String())
	if b.kafka {
		fmt.Fprintf(out, "relay: %d confirmed, %d republished after the crash (Kafka stores each copy), %d unknown outcomes\n",
			total["relay"].Confirmed, total["relay"].Swept, total["relay"].Unknown)
	} else {
		fmt.Fprintf(out, "relay: %d confirmed, %d republished after the crash (JetStream dropped %d as duplicates), %d unknown outcomes\n",
			total["relay"].Confirmed, total["relay"].Swept, total["relay"].Dupes, total["relay"].Unknown)
	}
	fmt.Fprintf(out, "consumers: %d redeliveries absorbed by the inbox as duplicates; parked: points %d, sms %d (poison %d + conflicts %d each)\n",
		absorbed, parked["points"], parked["sms"], rep.PoisonInjected, rep.ConflictsInjected)
	fmt.Fprintf(out, "crash points hit: %d\n", crashed)
	wantParked := uint64(rep.PoisonInjected + rep.ConflictsInjected)
	var problems []string
	if parked["points"] != wantParked || parked["sms"] != wantParked {
		problems = append(problems, fmt.Sprintf("parked %d/%d messages, want %d each", parked["points"], parked["sms"], wantParked))
	}
	if crashed < len(procs) {
		problems = append(problems, fmt.Sprintf("vacuous: only %d of %d crash points hit", crashed, len(procs)))
	}
	if absorbed == 0 {
		problems = append(problems, "vacuous: no duplicate delivery was absorbed")
	}
	if !rep.OK() || len(problems) > 0 {
		fmt.Fprintf(out, "verdict: FAILED %v %v\n", rep.Violations, problems)
		return exitError{exitFailed, errors.New("demo check failed")}
	}
	fmt.Fprintln(out, "verdict: OK: every paid order was awarded and texted exactly once; poison and conflicts parked, nothing else")
	return nil
}

// demoQuiet reports whether the outbox, the task table and both consumer
// groups have nothing left to do.
func demoQuiet(ctx context.Context, ordersURL, pointsURL string, b *demoBroker) (bool, error) {
	for _, t := range []struct{ url, table string }{{ordersURL, ""}, {pointsURL, shop.TaskTable}} {
		db, err := shop.Open(ctx, t.url)
		if err != nil {
			return false, err
		}
		s, err := db.Outbox(t.table)
		if err != nil {
			db.Close()
			return false, err
		}
		st, err := s.Stats(ctx)
		db.Close()
		if err != nil {
			return false, err
		}
		if st.New+st.Sending > 0 {
			return false, nil
		}
	}
	return b.quiet(ctx)
}

// demoBroker is the broker the demo runs on: its embedded NATS, or the
// Kafka brokers of --broker-url.
type demoBroker struct {
	url, about string
	kafka      bool
	relayArgs  []string
	quiet      func(ctx context.Context) (bool, error)
	// parked counts the events each consumer group parked in this run
	// (on Kafka, a record parked twice counts once).
	parked func(ctx context.Context) (map[string]uint64, error)
	close  func()
}

func startDemoBroker(ctx context.Context, dir, kafkaURL string) (*demoBroker, error) {
	if kafkaURL != "" {
		if err := shop.SetupKafka(ctx, kafkaURL); err != nil {
			return nil, fmt.Errorf("create the shop's Kafka topics: %w", err)
		}
		// Park topics may hold an earlier demo's records: count from here.
		since, err := shop.KafkaParkEnds(ctx, kafkaURL)
		if err != nil {
			return nil, err
		}
		cc, err := ferrykafka.ParseURL(kafkaURL)
		if err != nil {
			return nil, err
		}
		return &demoBroker{url: kafkaURL, about: "Kafka " + cc.String(), kafka: true,
			relayArgs: []string{"--topics", strings.Join(shop.KafkaTopics, ",")},
			quiet: func(ctx context.Context) (bool, error) {
				qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				return shop.KafkaQuiet(qctx, kafkaURL)
			},
			parked: func(ctx context.Context) (map[string]uint64, error) {
				recs, err := shop.KafkaParked(ctx, kafkaURL, since)
				if err != nil {
					return nil, err
				}
				out := map[string]uint64{}
				for g, rs := range recs {
					ids := map[string]bool{}
					for _, r := range rs {
						ids[r.ID] = true
					}
					out[g] = uint64(len(ids))
				}
				return out, nil
			},
			close: func() {}}, nil
	}
	srv, err := natsembed.Start(filepath.Join(dir, "nats"))
	if err != nil {
		return nil, err
	}
	natsURL := srv.ClientURL()
	if err := shop.SetupNATS(ctx, natsURL); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, err
	}
	return &demoBroker{url: natsURL, about: "embedded NATS JetStream " + natsURL,
		relayArgs: []string{"--stream", shop.Stream},
		quiet: func(ctx context.Context) (bool, error) {
			quiet, _, err := shop.NATSQuiet(ctx, natsURL)
			return quiet, err
		},
		parked: func(ctx context.Context) (map[string]uint64, error) {
			_, parked, err := shop.NATSQuiet(ctx, natsURL)
			return parked, err
		},
		close: func() { srv.Shutdown(); srv.WaitForShutdown() }}, nil
}

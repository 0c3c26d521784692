package shop

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

	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/natsembed"
	"github.com/ferrydev/ferry/internal/open"
)

// ErrDemoFailed is RunDemo's error when the demo ran to the end and its
// check found a violation (or a vacuous run).
var ErrDemoFailed = errors.New("demo check failed")

// DemoOptions configures RunDemo.
type DemoOptions struct {
	// Orders is how many orders the order service places (at least 20);
	// Rate, how many a second (positive).
	Orders, Rate int
	// Dir holds the demo's databases and NATS stream; empty, a new
	// temporary directory, removed afterwards unless Keep is set.
	Dir  string
	Keep bool
	// BrokerURL, when not empty, names the RabbitMQ broker
	// (amqp://user:pass@host:5672/vhost) or the Kafka brokers
	// (kafka://host:9092[,host2:9092]) to run on; empty, the demo runs an
	// embedded NATS server.
	BrokerURL string
	// Verbose copies the processes' own output to the demo's.
	Verbose bool
}

// RunDemo runs the whole shop with no setup and checks the result: SQLite
// databases in o.Dir, a NATS server with JetStream inside this process (or
// the RabbitMQ or Kafka brokers of o.BrokerURL), an SMS gateway on loopback, and four
// separate processes — the order service, a relay, a points consumer and
// an SMS consumer — each started with a crash point armed and started
// again after its crash. When the orders are placed and everything is
// quiet, it compares the databases and the gateway with the ground truth
// and writes what happened and a verdict to out.
//
// The processes are this process's own executable (os.Executable) run
// with a role's arguments (`relay --database-url ...`): its main must hand
// them to RunRole, as the shop's binary (cmd/shop) does.
//
// RunDemo returns an error wrapping ErrUsage for bad options or a
// configuration no retry mends, ErrDemoFailed when the check fails, and
// nil when it passes.
func RunDemo(ctx context.Context, out io.Writer, o DemoOptions) (err error) {
	defer func() {
		// A cause no retry mends (a Kafka login refused, say) is a
		// configuration error, as it is for ferry's commands.
		if err == nil || errors.Is(err, ErrUsage) {
			return
		}
		if perr := open.Permanent(err); perr != nil {
			err = fmt.Errorf("%w: %w", ErrUsage, perr)
		} else if errors.Is(err, ferrytype.ErrInvalidConfig) {
			err = fmt.Errorf("%w: %w", ErrUsage, err)
		}
	}()
	if o.Orders < 20 || o.Rate < 1 {
		return fmt.Errorf("%w: --orders must be at least 20 and --rate positive", ErrUsage)
	}
	if o.BrokerURL != "" && !open.IsKafka(o.BrokerURL) && !open.IsAMQP(o.BrokerURL) {
		return fmt.Errorf("%w: --broker-url: the demo runs on amqp:// (RabbitMQ) or kafka:// brokers, "+
			"or on its embedded NATS without the flag", ErrUsage)
	}
	if o.BrokerURL != "" {
		if err := open.ValidateBrokerURL(o.BrokerURL); err != nil {
			return fmt.Errorf("%w: %w", ErrUsage, err)
		}
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "ferry-demo-"); err != nil {
			return fmt.Errorf("demo directory: %w", err)
		}
		if !o.Keep {
			defer os.RemoveAll(dir)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}

	b, err := startDemoBroker(ctx, dir, o.BrokerURL)
	if err != nil {
		return err
	}
	defer b.close()
	gateway := NewGateway(10)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("SMS gateway: %w", err)
	}
	hs := &http.Server{Handler: gateway, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	gatewayURL := "http://" + ln.Addr().String()
	ordersURL := "sqlite://" + filepath.Join(dir, "orders.db")
	pointsURL := "sqlite://" + filepath.Join(dir, "points.db")
	for _, s := range []struct {
		url string
		fn  func(context.Context, *DB) error
	}{{ordersURL, SetupOrders}, {pointsURL, SetupPoints}} {
		db, err := Open(ctx, s.url)
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
		return fmt.Errorf("the shop's binary: %w", err)
	}
	var logw io.Writer = io.Discard
	if o.Verbose {
		logw = out
	}
	// The relay is ferry's relay (RunRelay: ferry.NewRelay on the store
	// and publisher `ferry relay` opens), with shorter intervals so that
	// the demo's crash and its recovery take seconds.
	procs := []*Proc{
		{Name: "orders", Args: []string{"orders", "--orders-db", ordersURL, "--first", "1", "--last", strconv.Itoa(o.Orders),
			"--rate", strconv.Itoa(o.Rate), "--poison-pct", "2", "--conflict-pct", "2", "--rollback-pct", "5"}},
		{Name: "relay", Args: append([]string{"relay", "--database-url", ordersURL, "--broker-url", b.url,
			"--ordered", "--poll-interval", "50ms", "--lease", "2s", "--publish-timeout", "1500ms", "--retry-initial", "50ms",
			"--sweep-interval", "200ms", "--retry-max", "1s"}, b.relayArgs...)},
		{Name: "points", Args: []string{"points", "--points-db", pointsURL, "--broker-url", b.url}},
		{Name: "sms", Args: []string{"sms", "--points-db", pointsURL, "--broker-url", b.url, "--gateway", gatewayURL}},
	}
	crashes := map[string]string{
		"orders": FaultOrderAfterCommit + ":" + strconv.Itoa(o.Orders/3),
		"relay":  ferryfault.RelayAfterPublish + ":3",
		"points": ferryfault.ConsumerAfterHandle + ":" + strconv.Itoa(o.Orders/4),
		"sms":    ferryfault.InboxBeforeCommit + ":" + strconv.Itoa(o.Orders/5),
	}
	if open.IsAMQP(o.BrokerURL) {
		// The points queue also takes the OrderCreated events, acked
		// without effect, so its n-th delivery may be one of them, whose
		// redelivery is no duplicate; the sms queue takes only OrderPaid.
		// The consumers swap crash points: the one killed between its
		// commit and its ack is always killed after a paid order's.
		crashes["points"], crashes["sms"] = ferryfault.InboxBeforeCommit+":"+strconv.Itoa(o.Orders/5),
			ferryfault.ConsumerAfterHandle+":"+strconv.Itoa(o.Orders/4)
	}
	for _, p := range procs {
		p.Bin, p.Log = bin, logw
		if err := p.Start("--crash-at", crashes[p.Name]); err != nil {
			return err
		}
		point, n, _ := strings.Cut(crashes[p.Name], ":")
		say("%-6s started; it kills itself (SIGKILL) at crash point %s the %s time it gets there", p.Name, point, ordinal(n))
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
				point, _, _ := strings.Cut(crashes[p.Name], ":")
				say("%-6s died at its crash point %s; starting it again, without one", p.Name, point)
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
			say("everything delivered; stopping the processes")
			for _, p := range procs {
				p.Stop(20 * time.Second)
			}
			// With the consumers gone, no message is held unacknowledged
			// (RabbitMQ counts only the ready ones): what is left shows.
			if quiet, err := demoQuiet(ctx, ordersURL, pointsURL, b); err != nil {
				return err
			} else if quiet {
				goto settled
			}
			say("messages came back to the queues as the consumers stopped; starting the relay and the consumers again")
			for _, p := range procs {
				if p.Name == "orders" {
					continue
				}
				if err := p.Start(); err != nil {
					return err
				}
			}
			quietSince = time.Time{}
		}
	}
settled:
	db1, err := Open(ctx, ordersURL)
	if err != nil {
		return err
	}
	defer db1.Close()
	db2, err := Open(ctx, pointsURL)
	if err != nil {
		return err
	}
	defer db2.Close()
	rep, err := Check(ctx, db1, db2, gateway.Stats())
	if err != nil {
		return err
	}
	parked, err := b.parked(ctx)
	if err != nil {
		return err
	}
	total := map[string]Stats{}
	for _, p := range procs {
		total[p.Name] = p.Total()
	}
	absorbed := total["points"].Duplicate + total["sms"].Duplicate
	fmt.Fprintln(out)
	fmt.Fprint(out, rep.String())
	if b.storesCopies != "" {
		fmt.Fprintf(out, "relay: %d confirmed, %d republished after the crash (%s stores each copy), %d unknown outcomes\n",
			total["relay"].Confirmed, total["relay"].Swept, b.storesCopies, total["relay"].Unknown)
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
		return ErrDemoFailed
	}
	fmt.Fprintln(out, "verdict: OK: every paid order was awarded and texted exactly once; poison and conflicts parked, nothing else")
	return nil
}

// ordinal spells n (a decimal count) as "1st", "2nd", "3rd", "133rd".
func ordinal(n string) string {
	suffix := "th"
	if !strings.HasSuffix(n, "11") && !strings.HasSuffix(n, "12") && !strings.HasSuffix(n, "13") {
		switch {
		case strings.HasSuffix(n, "1"):
			suffix = "st"
		case strings.HasSuffix(n, "2"):
			suffix = "nd"
		case strings.HasSuffix(n, "3"):
			suffix = "rd"
		}
	}
	return n + suffix
}

// demoQuiet reports whether the outbox, the task table and both consumer
// groups have nothing left to do.
func demoQuiet(ctx context.Context, ordersURL, pointsURL string, b *demoBroker) (bool, error) {
	for _, t := range []struct{ url, table string }{{ordersURL, ""}, {pointsURL, TaskTable}} {
		db, err := Open(ctx, t.url)
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
// RabbitMQ or Kafka brokers of --broker-url.
type demoBroker struct {
	url, about string
	// storesCopies names a broker that stores each copy the relay
	// republishes (no deduplication by message id, as JetStream has).
	storesCopies string
	relayArgs    []string
	quiet        func(ctx context.Context) (bool, error)
	// parked counts the events each consumer group parked in this run
	// (on Kafka, a record parked twice counts once).
	parked func(ctx context.Context) (map[string]uint64, error)
	close  func()
}

// startDemoBroker prepares the RabbitMQ or Kafka brokers at brokerURL for
// the shop, or, when brokerURL is empty, starts an embedded NATS server
// storing its stream under dir.
func startDemoBroker(ctx context.Context, dir, brokerURL string) (*demoBroker, error) {
	if open.IsAMQP(brokerURL) {
		return startDemoRabbitMQ(ctx, brokerURL)
	}
	if kafkaURL := brokerURL; kafkaURL != "" {
		if err := SetupKafka(ctx, kafkaURL); err != nil {
			return nil, fmt.Errorf("create the shop's Kafka topics: %w", err)
		}
		// Park topics may hold an earlier demo's records: count from here.
		since, err := KafkaParkEnds(ctx, kafkaURL)
		if err != nil {
			return nil, err
		}
		cc, err := ferrykafka.ParseURL(kafkaURL)
		if err != nil {
			return nil, err
		}
		return &demoBroker{url: kafkaURL, about: "Kafka " + cc.String(), storesCopies: "Kafka",
			relayArgs: []string{"--topics", strings.Join(KafkaTopics, ",")},
			quiet: func(ctx context.Context) (bool, error) {
				qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				return KafkaQuiet(qctx, kafkaURL)
			},
			parked: func(ctx context.Context) (map[string]uint64, error) {
				recs, err := KafkaParked(ctx, kafkaURL, since)
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
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	natsURL := srv.ClientURL()
	if err := SetupNATS(ctx, natsURL); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, err
	}
	return &demoBroker{url: natsURL, about: "embedded NATS JetStream " + natsURL,
		relayArgs: []string{"--stream", Stream},
		quiet: func(ctx context.Context) (bool, error) {
			quiet, _, err := NATSQuiet(ctx, natsURL)
			return quiet, err
		},
		parked: func(ctx context.Context) (map[string]uint64, error) {
			_, parked, err := NATSQuiet(ctx, natsURL)
			return parked, err
		},
		close: func() { srv.Shutdown(); srv.WaitForShutdown() }}, nil
}

// startDemoRabbitMQ declares the shop's topology on the RabbitMQ broker at
// url (quorum queues points and sms, their parking queues, bound to
// amq.topic). Queues that hold messages of an earlier run are refused:
// the check would count them.
func startDemoRabbitMQ(ctx context.Context, url string) (*demoBroker, error) {
	if err := SetupAMQP(ctx, url); err != nil {
		return nil, fmt.Errorf("declare the shop's RabbitMQ topology: %w", err)
	}
	left, err := AMQPReady(ctx, url, consumerGroups...)
	if err != nil {
		return nil, err
	}
	if left["points"]+left["sms"] > 0 {
		return nil, fmt.Errorf("%w: the queues points and sms hold %d and %d messages of an earlier run: "+
			"purge them (rabbitmqctl purge_queue points; rabbitmqctl purge_queue sms) "+
			"or give the demo a vhost of its own (amqp://host:5672/demo)", ErrUsage, left["points"], left["sms"])
	}
	// Parking queues may hold an earlier demo's messages: count from here.
	parked := func(ctx context.Context) (map[string]map[string]bool, error) {
		out := map[string]map[string]bool{}
		for _, g := range consumerGroups {
			ids, err := AMQPParkedIDs(ctx, url, g+".parking")
			if err != nil {
				return nil, err
			}
			out[g] = ids
		}
		return out, nil
	}
	before, err := parked(ctx)
	if err != nil {
		return nil, err
	}
	return &demoBroker{url: url, about: "RabbitMQ " + ferrytype.RedactURL(url), storesCopies: "RabbitMQ",
		quiet: func(ctx context.Context) (bool, error) {
			ready, err := AMQPReady(ctx, url, consumerGroups...)
			return err == nil && ready["points"]+ready["sms"] == 0, err
		},
		// A message parked twice (its consumer killed between the park and
		// the ack) counts once, as on Kafka.
		parked: func(ctx context.Context) (map[string]uint64, error) {
			now, err := parked(ctx)
			if err != nil {
				return nil, err
			}
			out := map[string]uint64{}
			for g, ids := range now {
				for id := range ids {
					if !before[g][id] {
						out[g]++
					}
				}
			}
			return out, nil
		},
		close: func() {}}, nil
}

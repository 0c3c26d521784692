package shop

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/internal/fault"
)

// ErrUsage marks a bad role name, flag or flag value.
var ErrUsage = errors.New("usage")

// Roles are the processes RunRole runs.
var Roles = []string{"setup", "orders", "payments", "relay", "points", "sms", "check"}

// RunRole runs one process of the shop until it is done or ctx ends:
// args[0] names the role, the rest are its flags (-h lists them).
//
//	setup   create the orders and points databases' tables
//	orders  place orders (--first..--last) with their outbox events, and
//	        pay them through the payments API (--payments-url, else one
//	        served in the same process)
//	payments the payments API, behind the Idempotency-Key middleware
//	relay   the ferry relay, publishing the orders outbox
//	points  the points consumer
//	sms     the SMS consumer and its task worker
//	check   compare the databases and the gateway with the ground truth
//
// orders, payments, relay, points and sms take --crash-at point[:n]: the process
// kills itself with SIGKILL the n-th time (default first) it reaches the
// named fault point. The relay also takes --lose-confirm-pct, and
// --pause-at point=file: it stops itself with SIGSTOP at the point whenever
// the file exists (removing it first). They report
// their counters on STATS lines on stdout (see ParseStats).
//
// RunRole is the entry point of the shop's binary (examples/shop/cmd/shop),
// whose processes the chaos suite and the demo (RunDemo) start: one
// implementation of each role for both.
func RunRole(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: name a role: %s", ErrUsage, strings.Join(Roles, ", "))
	}
	name, args := args[0], args[1:]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var run func(ctx context.Context, stdout io.Writer) error
	switch name {
	case "setup":
		run = setupRole(fs)
	case "orders":
		run = ordersRole(fs)
	case "payments":
		run = paymentsRole(fs)
	case "relay":
		o := &RelayOptions{}
		o.Flags(fs)
		run = func(ctx context.Context, stdout io.Writer) error {
			o.Out, o.Log = stdout, stderr
			return RunRelay(ctx, *o)
		}
	case "points", "sms":
		run = consumerRole(fs, name)
	case "check":
		run = checkRole(fs)
	default:
		return fmt.Errorf("%w: unknown role %q: want one of %s", ErrUsage, name, strings.Join(Roles, ", "))
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %s: %w", ErrUsage, name, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: %s: unexpected arguments %q", ErrUsage, name, fs.Args())
	}
	return run(ctx, stdout)
}

// crashFlag declares --crash-at and returns the fault-point function it
// arms (nil when not given).
func crashFlag(fs *flag.FlagSet) func() (func(ctx context.Context, point string) error, error) {
	spec := fs.String("crash-at", "", "kill this process with SIGKILL the n-th time it reaches a fault point: point[:n]")
	return func() (func(ctx context.Context, point string) error, error) {
		crash, err := fault.Crash(*spec)
		if err != nil {
			return nil, fmt.Errorf("%w: --crash-at: %w", ErrUsage, err)
		}
		return crash, nil
	}
}

func setupRole(fs *flag.FlagSet) func(ctx context.Context, _ io.Writer) error {
	ordersDB := fs.String("orders-db", "", "orders database URL")
	pointsDB := fs.String("points-db", "", "points database URL")
	return func(ctx context.Context, _ io.Writer) error {
		for _, s := range []struct {
			url string
			fn  func(context.Context, *DB) error
		}{{*ordersDB, SetupOrders}, {*pointsDB, SetupPoints}} {
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
		return nil
	}
}

func ordersRole(fs *flag.FlagSet) func(ctx context.Context, stdout io.Writer) error {
	ordersDB := fs.String("orders-db", "", "orders database URL")
	first := fs.Int64("first", 1, "first order id")
	last := fs.Int64("last", 100, "last order id")
	rate := fs.Int("rate", 0, "orders per second (0: as fast as possible)")
	poison := fs.Int("poison-pct", 0, "percent of payments announced with an undecodable event")
	conflict := fs.Int("conflict-pct", 0, "percent of payments announced twice with another amount")
	rollback := fs.Int("rollback-pct", 0, "percent of payments declined (rolled back) after enqueueing")
	paymentsURL := fs.String("payments-url", "", "payments API URL (default: serve it in this process)")
	payTimeout := fs.Duration("payment-timeout", 2*time.Second, "first payment attempt's timeout (doubled on each retry, up to 5s)")
	crashAt := crashFlag(fs)
	return func(ctx context.Context, stdout io.Writer) error {
		crash, err := crashAt()
		if err != nil {
			return err
		}
		db, err := Open(ctx, *ordersDB)
		if err != nil {
			return err
		}
		defer db.Close()
		store, err := db.Outbox("")
		if err != nil {
			return err
		}
		ob, err := ferry.NewOutbox(store, nil)
		if err != nil {
			return err
		}
		// Resume after the last order a previous run created.
		var max sql.NullInt64
		if err := db.QueryRowContext(ctx, db.Q("SELECT MAX(id) FROM shop_order WHERE id BETWEEN ? AND ?"), *first, *last).Scan(&max); err != nil {
			return err
		}
		from := *first
		if max.Valid {
			from = max.Int64 + 1
		}
		client := &PaymentClient{URL: *paymentsURL, Timeout: *payTimeout}
		if client.URL == "" {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			srvCtx, stopSrv := context.WithCancel(context.Background())
			srvDone := make(chan error, 1)
			go func() { srvDone <- ServePayments(srvCtx, ln, db, PaymentsOptions{FaultPoint: crash}) }()
			defer func() { stopSrv(); <-srvDone }()
			client.URL = "http://" + ln.Addr().String()
		}
		svc := &OrderService{DB: db, Outbox: ob, Payments: client, PoisonPct: *poison, ConflictPct: *conflict,
			RollbackPct: *rollback, FaultPoint: crash}
		if max.Valid {
			// The last order a previous run created may have been paid
			// with its answer lost (the process died): pay it again, with
			// the same key. It must get the stored answer, or run now if
			// the payment never committed.
			var answered int
			if err := db.QueryRowContext(ctx, db.Q("SELECT COUNT(*) FROM shop_payment_reply WHERE order_id = ?"), max.Int64).Scan(&answered); err != nil {
				return err
			}
			if answered == 0 {
				if _, err := svc.Pay(ctx, max.Int64); err != nil {
					return fmt.Errorf("order %d: %w", max.Int64, err)
				}
			}
		}
		statsCtx, stopStats := context.WithCancel(context.Background())
		statsDone := make(chan struct{})
		go func() {
			defer close(statsDone)
			ReportStats(statsCtx, stdout, 200*time.Millisecond, func() Stats {
				return Stats{Role: "orders", Paid: svc.Paid.Load(), UnknownCommits: CommitResets.Load(),
					PayRetries: client.Retries.Load(), PayReplays: client.Replays.Load(), PayInProgress: client.InProgress.Load()}
			})
		}()
		paid, err := svc.Place(ctx, from, *last, *rate)
		stopStats()
		<-statsDone
		fmt.Fprintf(stdout, "orders %d..%d placed, %d paid\n", from, *last, paid)
		return err
	}
}

func paymentsRole(fs *flag.FlagSet) func(ctx context.Context, stdout io.Writer) error {
	ordersDB := fs.String("orders-db", "", "orders database URL")
	addr := fs.String("addr", "127.0.0.1:0", "address to serve the payments API on")
	lease := fs.Duration("lease", 0, "idempotency key lease (default ferryhttp's, 30s)")
	slow := fs.Int("slow-pct", 0, "percent of payments that take 200-400ms more inside their transaction")
	crashAt := crashFlag(fs)
	return func(ctx context.Context, stdout io.Writer) error {
		crash, err := crashAt()
		if err != nil {
			return err
		}
		// Restarted during an outage, it waits for its database.
		var db *DB
		if err := retryStart(ctx, func() (err error) { db, err = Open(ctx, *ordersDB); return err }); err != nil {
			return err
		}
		defer db.Close()
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "payments API on http://%s\n", ln.Addr())
		return ServePayments(ctx, ln, db, PaymentsOptions{Lease: *lease, SlowPct: *slow, FaultPoint: crash})
	}
}

func consumerRole(fs *flag.FlagSet, role string) func(ctx context.Context, stdout io.Writer) error {
	pointsDB := fs.String("points-db", "", "points database URL (the consumers' inbox and the SMS task table)")
	brokerURL := fs.String("broker-url", "", "broker URL: nats://, amqp:// or kafka://")
	gatewayURL := fs.String("gateway", "", "SMS gateway URL (sms)")
	conc := fs.Int("concurrency", 4, "handlers at once")
	crashAt := crashFlag(fs)
	return func(ctx context.Context, stdout io.Writer) error {
		crash, err := crashAt()
		if err != nil {
			return err
		}
		return RunConsumer(ctx, ConsumerOptions{Role: role, DB: *pointsDB, BrokerURL: *brokerURL,
			GatewayURL: *gatewayURL, Concurrency: *conc, FaultPoint: crash, Out: stdout})
	}
}

func checkRole(fs *flag.FlagSet) func(ctx context.Context, stdout io.Writer) error {
	ordersDB := fs.String("orders-db", "", "orders database URL")
	pointsDB := fs.String("points-db", "", "points database URL")
	gatewayURL := fs.String("gateway", "", "SMS gateway URL")
	return func(ctx context.Context, stdout io.Writer) error {
		rep, err := checkURLs(ctx, *ordersDB, *pointsDB, *gatewayURL)
		if err != nil {
			return err
		}
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintln(stdout, string(b))
		if !rep.OK() {
			return fmt.Errorf("check failed: %v", rep.Violations)
		}
		return nil
	}
}

// checkURLs runs Check on the databases at the URLs and the gateway's
// counters read over HTTP.
func checkURLs(ctx context.Context, ordersURL, pointsURL, gatewayURL string) (*Report, error) {
	odb, err := Open(ctx, ordersURL)
	if err != nil {
		return nil, err
	}
	defer odb.Close()
	pdb, err := Open(ctx, pointsURL)
	if err != nil {
		return nil, err
	}
	defer pdb.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, gatewayURL+"/stats", nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("gateway stats: %w", err)
	}
	defer resp.Body.Close()
	var gw GatewayStats
	if err := json.NewDecoder(resp.Body).Decode(&gw); err != nil {
		return nil, fmt.Errorf("gateway stats: %w", err)
	}
	return Check(ctx, odb, pdb, gw)
}

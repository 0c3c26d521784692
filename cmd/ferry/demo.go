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
	"github.com/ferrydev/ferry/internal/natsembed"
)

func newDemo() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the reference shop on SQLite and an embedded NATS, crash each of its processes once, and check the result",
		Long: `Runs the reference system with no setup: SQLite databases and a NATS server
with JetStream inside this process, an SMS gateway on loopback, and four
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
happened and a verdict, and exits 1 if the check fails.`,
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
	dir            string
	verbose, quiet bool
}

func runDemo(ctx context.Context, out io.Writer, o demoOptions) (err error) {
	if o.orders < 20 || o.rate < 1 {
		return usageError{errors.New("--orders must be at least 20 and --rate positive")}
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

	srv, err := natsembed.Start(filepath.Join(dir, "nats"))
	if err != nil {
		return err
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	natsURL := srv.ClientURL()
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
	if err := shop.SetupNATS(ctx, natsURL); err != nil {
		return err
	}
	fmt.Fprintf(out, "ferry demo: SQLite in %s, embedded NATS JetStream %s, SMS gateway %s\n", dir, natsURL, gatewayURL)

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
		{Name: "relay", Args: append(role, "relay", "--database-url", ordersURL, "--broker-url", natsURL, "--stream", shop.Stream,
			"--ordered", "--poll-interval", "50ms", "--lease", "2s", "--publish-timeout", "1500ms", "--retry-initial", "50ms",
			"--sweep-interval", "200ms", "--retry-max", "1s")},
		{Name: "points", Args: append(role, "points", "--points-db", pointsURL, "--broker-url", natsURL)},
		{Name: "sms", Args: append(role, "sms", "--points-db", pointsURL, "--broker-url", natsURL, "--gateway", gatewayURL)},
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
		quiet, err := demoQuiet(ctx, ordersURL, pointsURL, natsURL)
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
	_, parked, err := shop.NATSQuiet(ctx, natsURL)
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
	fmt.Fprintf(out, "relay: %d confirmed, %d republished after the crash (JetStream dropped %d as duplicates), %d unknown outcomes\n",
		total["relay"].Confirmed, total["relay"].Swept, total["relay"].Dupes, total["relay"].Unknown)
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
func demoQuiet(ctx context.Context, ordersURL, pointsURL, natsURL string) (bool, error) {
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
	quiet, _, err := shop.NATSQuiet(ctx, natsURL)
	return quiet, err
}

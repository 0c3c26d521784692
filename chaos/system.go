package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/ferrydev/ferry/examples/shop"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp/ferryamqptest"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
)

// Options configure one run of one scenario.
type Options struct {
	// DB is "mysql", "postgres" or "sqlite"; Broker is "amqp", "nats"
	// or "kafka".
	DB, Broker string
	// Orders is the number of orders the order services place in all;
	// Rate the orders per second of each of the two order services.
	Orders, Rate int
	// Bin is the shop's binary the processes run (BuildShop).
	Bin string
	// KfakeBin is the Kafka broker the harness runs for Broker "kafka"
	// (BuildKfake).
	KfakeBin string
	// NATSServer is the nats-server binary the harness runs a server of
	// the run's own with, for Broker "nats". Empty: the shared server at
	// NATSURL, which one run at a time has (the shop's stream and
	// subjects are fixed names).
	NATSServer string
	// Dir holds SQLite files and the like. Default: a temporary directory.
	Dir string
	// Out receives progress lines; Log the processes' own output.
	Out, Log io.Writer
	// Service addresses (direct, not proxied).
	MySQLURL, PostgresURL, NATSURL, AMQPURL string
	// AMQPNode names the RabbitMQ node at AMQPURL for rabbitmqctl -n. The
	// broker-restart scenario stops and starts its application, so it
	// must be a node of the run's own (testsvc.DisruptRabbitMQ: the one
	// scripts/services.sh starts on port 5673); without one that scenario
	// fails on RabbitMQ rather than stop a shared server. Empty:
	// rabbitmqctl's default node, for the other scenarios.
	AMQPNode string
	// Settle bounds the wait for the system to go quiet after the faults.
	Settle time.Duration
	// MinFaults is the shortest time faults are injected, however fast
	// the orders are placed. Default 10s.
	MinFaults time.Duration
	// LogRelay runs the relays as log relays (--source log): MySQLURL or
	// PostgresURL must then be a server that keeps a change log (a ROW
	// binlog, wal_level=logical). Each run has its own replication slot.
	LogRelay bool
	// Failover runs the database as a primary with a replica of the
	// run's own (dbPair), started in Dir from the server's binaries,
	// for the db-failover scenario; MySQLURL or PostgresURL are then not
	// used.
	Failover bool
	// Cluster runs the broker as a three-node cluster, for the
	// node-kill scenario: NATS, three nats-server processes of the run's
	// own (NATSServer) with the stream on all three (R3) and
	// sync_interval always; RabbitMQ, AMQPCluster with quorum queues.
	Cluster bool
	// AMQPCluster is the tests' own three-node RabbitMQ cluster
	// (scripts/rabbitmq-cluster.sh), held by the test that runs
	// (ferryamqptest.RabbitMQCluster), for Broker "amqp" with Cluster:
	// AMQPURL and AMQPNode are then not used.
	AMQPCluster *ferryamqptest.Cluster
}

// system is the shop running as processes for one scenario.
type system struct {
	o       Options
	start   time.Time
	px      *proxies
	broker  broker
	gateway *shop.Gateway
	http    *http.Server

	ordersURL, pointsURL            string // through the proxy (Scenario.Network), else direct
	slot                            string // the log relays' replication slot (PostgreSQL)
	logGaps                         int    // logs made to lose the relays' checkpoint (log-gap)
	pair                            dbPair // the database pair (Options.Failover)
	failovers                       int    // the pair's failovers (db-failover)
	nodeKills, leaderMoves          int    // broker nodes faulted, and leaders moved (node-kill, node-pause)
	ownDir                          bool   // o.Dir was made for the run, and goes with it
	ordersDirect, pointsDirect      string
	dropDBs                         func()
	procs                           []*shop.Proc
	mu                              sync.Mutex
	kills, pauses, restarts, toxics int
	brokerRestarts, paymentStarts   int
	// The pause scenario's armings that no batch took, and its pauses
	// whose late mark was, or was not, seen fenced.
	pauseMisses, pausesFenced, pausesUnfenced int
	consumerPauses                            int // consumers held stopped past their session timeout
	events                                    []string
	killed                                    map[*shop.Proc]int // the harness's SIGKILLs, by process
}

// crashed reports whether p died at a crash point (of its own) at least
// once: more deaths than the harness's kills.
func (s *system) crashed(p *shop.Proc) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return p.Deaths() > s.killed[p]
}

func (s *system) say(format string, args ...any) {
	line := fmt.Sprintf("[%6.1fs] %s", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
	s.mu.Lock()
	s.events = append(s.events, line)
	s.mu.Unlock()
	if s.o.Out != nil {
		fmt.Fprintln(s.o.Out, line)
	}
}

func newSystem(ctx context.Context, o Options, network bool) (_ *system, err error) {
	s := &system{o: o, start: time.Now(), px: newProxies(network), gateway: shop.NewGateway(5), killed: map[*shop.Proc]int{}}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if o.Dir == "" {
		if s.o.Dir, err = os.MkdirTemp("", "ferry-chaos-"); err != nil {
			return nil, err
		}
		s.ownDir = true
	}
	suffix := strconv.FormatUint(rand.Uint64()%1e10, 36)
	s.slot = "ferry_chaos_" + suffix
	if o.Failover {
		if s.pair, err = startPair(ctx, s.o, filepath.Join(s.o.Dir, "db")); err != nil {
			return nil, fmt.Errorf("start the database pair: %w", err)
		}
		switch o.DB {
		case "postgres":
			s.o.PostgresURL = s.pair.adminURL()
		case "mysql":
			s.o.MySQLURL = s.pair.adminURL()
		}
	}
	if err := s.setupDatabases(ctx, suffix); err != nil {
		return nil, err
	}
	switch o.Broker {
	case "nats":
		var b *natsBroker
		b, err = newNATSBroker(ctx, s.o, s.px)
		if err == nil {
			s.broker = b
		}
	case "amqp":
		var b *amqpBroker
		if o.Cluster {
			b, err = newAMQPClusterBroker(ctx, o, s.px, suffix)
		} else {
			b, err = newAMQPBroker(ctx, o.AMQPURL, o.AMQPNode, s.px, suffix)
		}
		if err == nil {
			s.broker = b
		}
	case "kafka":
		var b *kafkaBroker
		b, err = newKafkaBroker(ctx, s.o, s.px)
		if err == nil {
			s.broker = b
		}
	default:
		err = fmt.Errorf("unknown broker %q", o.Broker)
	}
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.http = &http.Server{Handler: s.gateway, ReadHeaderTimeout: 5 * time.Second}
	go s.http.Serve(ln)
	gatewayURL := "http://" + ln.Addr().String()

	for _, db := range []struct {
		url string
		fn  func(context.Context, *shop.DB) error
	}{{s.ordersDirect, shop.SetupOrders}, {s.pointsDirect, shop.SetupPoints}} {
		sdb, err := shop.Open(ctx, db.url)
		if err != nil {
			return nil, err
		}
		err = db.fn(ctx, sdb)
		sdb.Close()
		if err != nil {
			return nil, err
		}
	}
	// The payments API, a process of its own on a fixed port, so that a
	// restart serves the clients that retry.
	payLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	payAddr := payLn.Addr().String()
	payLn.Close()
	s.procs = append(s.procs, &shop.Proc{Name: "payments-1", Args: []string{"payments", "--orders-db", s.ordersURL,
		"--addr", payAddr, "--lease", "2s"}})
	per := (o.Orders + 1) / 2
	for i := 0; i < 2; i++ {
		first, last := i*per+1, min((i+1)*per, o.Orders)
		s.procs = append(s.procs, &shop.Proc{Name: fmt.Sprintf("orders-%d", i+1), Args: []string{"orders",
			"--orders-db", s.ordersURL, "--first", strconv.Itoa(first), "--last", strconv.Itoa(last),
			"--rate", strconv.Itoa(o.Rate), "--poison-pct", "1", "--conflict-pct", "1", "--rollback-pct", "3",
			"--payments-url", "http://" + payAddr, "--payment-timeout", "150ms"}})
	}
	for i := 0; i < 2; i++ {
		args := append([]string{"relay", "--database-url", s.ordersURL, "--broker-url", s.broker.url(),
			"--poll-interval", "50ms", "--lease", relayLease.String(), "--publish-timeout", "2s", "--sweep-interval", "500ms", "--heartbeat", "500ms",
			"--retry-initial", "50ms", "--retry-max", "1s", "--max-attempts", "1000", "--lose-confirm-pct", "3",
			"--stats-interval", "200ms"}, s.broker.relayArgs()...)
		if o.LogRelay {
			args = append(args, "--source", "log", "--log-lease", "2s", "--log-poll-interval", "1s", "--log-slot", s.slot)
		}
		s.procs = append(s.procs, &shop.Proc{Name: fmt.Sprintf("relay-%d", i+1), Args: args})
	}
	for i := 0; i < 2; i++ {
		s.procs = append(s.procs, &shop.Proc{Name: fmt.Sprintf("points-%d", i+1), Args: []string{"points",
			"--points-db", s.pointsURL, "--broker-url", s.broker.url()}})
	}
	s.procs = append(s.procs, &shop.Proc{Name: "sms-1", Args: []string{"sms", "--points-db", s.pointsURL,
		"--broker-url", s.broker.url(), "--gateway", gatewayURL}})
	for _, p := range s.procs {
		p.Bin, p.Log = o.Bin, o.Log
	}
	return s, nil
}

// setupDatabases creates fresh orders and points databases and proxies
// them.
func (s *system) setupDatabases(ctx context.Context, suffix string) error {
	switch s.o.DB {
	case "sqlite":
		s.ordersDirect = "sqlite://" + filepath.Join(s.o.Dir, "orders.db")
		s.pointsDirect = "sqlite://" + filepath.Join(s.o.Dir, "points.db")
		s.ordersURL, s.pointsURL = s.ordersDirect, s.pointsDirect
		return nil
	case "mysql":
		admin, err := ferrymysql.Open(ctx, s.o.MySQLURL, nil)
		if err != nil {
			return err
		}
		defer admin.Close()
		return s.createDBs(ctx, admin.DB(), s.o.MySQLURL, suffix, "`")
	case "postgres":
		admin, err := sql.Open("pgx", s.o.PostgresURL)
		if err != nil {
			return err
		}
		defer admin.Close()
		return s.createDBs(ctx, admin, s.o.PostgresURL, suffix, `"`)
	}
	return fmt.Errorf("unknown database %q", s.o.DB)
}

func (s *system) createDBs(ctx context.Context, admin *sql.DB, adminURL, suffix, q string) error {
	u, err := url.Parse(adminURL)
	if err != nil {
		return err
	}
	proxied, err := s.px.add("db", u.Host)
	if err != nil {
		return err
	}
	names := []string{"chaos_orders_" + suffix, "chaos_points_" + suffix}
	for _, n := range names {
		if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+q+n+q); err != nil {
			return fmt.Errorf("create database %s: %w", n, err)
		}
	}
	s.dropDBs = func() {
		a, err := sql.Open(map[string]string{"`": "mysql", `"`: "pgx"}[q], dsnFor(adminURL))
		if err != nil {
			return
		}
		defer a.Close()
		for _, n := range names {
			force := ""
			if q == `"` {
				force = " WITH (FORCE)"
				// A database with a replication slot cannot be dropped,
				// and a slot left behind keeps WAL for ever: the relays
				// are stopped; their walsenders are ended, the slot
				// dropped once free.
				for range 50 {
					_, _ = a.Exec("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active", n)
					_, _ = a.Exec("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active", n)
					var left int
					if a.QueryRow("SELECT count(*) FROM pg_replication_slots WHERE database = $1", n).Scan(&left); left == 0 {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			_, _ = a.Exec("DROP DATABASE IF EXISTS " + q + n + q + force)
		}
	}
	with := func(host, db string) string {
		v := *u
		v.Host, v.Path = host, "/"+db
		return v.String()
	}
	s.ordersDirect, s.pointsDirect = with(u.Host, names[0]), with(u.Host, names[1])
	s.ordersURL, s.pointsURL = with(proxied, names[0]), with(proxied, names[1])
	return nil
}

// dsnFor turns a service URL into something sql.Open takes.
func dsnFor(raw string) string {
	if strings.HasPrefix(raw, "mysql:") {
		cfg, err := ferrymysql.ParseURL(raw)
		if err == nil {
			return cfg.FormatDSN()
		}
	}
	return raw
}

func (s *system) close() {
	for _, p := range s.procs {
		if p.Running() {
			p.Signal(syscall.SIGCONT)
			p.Stop(15 * time.Second)
		}
	}
	if s.http != nil {
		s.http.Close()
	}
	if s.broker != nil {
		s.broker.close()
	}
	s.px.close()
	if s.dropDBs != nil {
		s.dropDBs()
	}
	if s.pair != nil {
		s.pair.close()
	}
	if s.ownDir {
		_ = os.RemoveAll(s.o.Dir)
	}
}

func (s *system) byPrefix(prefix string) []*shop.Proc {
	var out []*shop.Proc
	for _, p := range s.procs {
		if strings.HasPrefix(p.Name, prefix) {
			out = append(out, p)
		}
	}
	return out
}

// crashPoints are the named points each role can be killed at.
var crashPoints = map[string][]string{
	"orders":   {shop.FaultOrderAfterCommit},
	"payments": {ferryfault.HTTPAfterCommit, shop.FaultPaymentInHandler},
	"relay":    {"relay.after-claim", "publish.before-confirm", "relay.after-publish"},
	"points":   {"consumer.after-handle", "inbox.before-commit"},
	"sms":      {"consumer.after-handle", "inbox.before-commit", "relay.after-claim", "relay.after-publish"},
}

func role(p *shop.Proc) string { return p.Name[:strings.IndexByte(p.Name, '-')] }

// randomCrash draws a crash point for p and a hit count, and returns the
// arguments that arm it.
func randomCrash(p *shop.Proc) []string {
	pts := crashPoints[role(p)]
	return crashAt(pts[rand.IntN(len(pts))], 1+rand.IntN(40))
}

// crashAt returns the arguments that arm a crash at the n-th hit of point.
func crashAt(point string, n int) []string {
	return []string{"--crash-at", fmt.Sprintf("%s:%d", point, n)}
}

// paymentCrash arms the payments server's next crash: inside a payment's
// transaction and after a commit, in turn, at an early hit.
func (s *system) paymentCrash(p *shop.Proc) []string {
	if role(p) != "payments" {
		return nil
	}
	s.mu.Lock()
	s.paymentStarts++
	n := s.paymentStarts
	s.mu.Unlock()
	point := shop.FaultPaymentInHandler
	if n%2 == 0 {
		point = ferryfault.HTTPAfterCommit
	}
	return crashAt(point, 3+rand.IntN(20))
}

// supervise restarts processes that died (SIGKILL from the harness or a
// crash point), after a short pause, until ctx ends. Order services that
// finished are left alone. arm, when set, gives each restart's extra
// arguments.
func (s *system) supervise(ctx context.Context, arm func(s *system, p *shop.Proc) []string) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	down := map[*shop.Proc]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for _, p := range s.procs {
			if p.Running() {
				continue
			}
			if !p.Killed() {
				if role(p) == "orders" && p.Succeeded() {
					continue // done
				}
				return fmt.Errorf("%s exited by itself (%s); its last lines:\n%s", p.Name, p.State(), p.Tail())
			}
			since, ok := down[p]
			if !ok {
				down[p] = time.Now()
				continue
			}
			if time.Since(since) < 300*time.Millisecond {
				continue
			}
			delete(down, p)
			var args []string
			if arm != nil {
				args = arm(s, p)
			}
			if err := p.Start(args...); err != nil {
				return err
			}
			s.mu.Lock()
			s.restarts++
			s.mu.Unlock()
		}
	}
}

// procReport describes each process: its state, its deaths and its last
// lines, for an error that must say what the system was doing.
func (s *system) procReport() string {
	var b strings.Builder
	for _, p := range s.procs {
		tail := strings.TrimSpace(p.Tail())
		if tail == "" {
			fmt.Fprintf(&b, "%s: %s, %d deaths; no output\n", p.Name, p.State(), p.Deaths())
			continue
		}
		fmt.Fprintf(&b, "%s: %s, %d deaths; last lines:\n", p.Name, p.State(), p.Deaths())
		lines := strings.Split(tail, "\n")
		for _, l := range lines[max(0, len(lines)-5):] {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	return b.String()
}

// ordersDone reports whether both order services finished.
func (s *system) ordersDone() bool {
	for _, p := range s.byPrefix("orders") {
		if !p.Succeeded() {
			return false // running, killed and due for a restart, or failed (supervise reports it)
		}
	}
	return true
}

// quiet reports whether nothing is left to do: outbox and task table
// drained, consumer queues empty (final: see broker.quiet). When not, it
// says what is left.
func (s *system) quiet(ctx context.Context, dbs *quietDBs, final bool) (bool, string, error) {
	for _, t := range []struct {
		name, url, table string
		db               **shop.DB
	}{{"orders outbox", s.ordersDirect, "", &dbs.orders}, {"sms tasks", s.pointsDirect, shop.TaskTable, &dbs.points}} {
		if *t.db == nil {
			db, err := shop.Open(ctx, t.url)
			if err != nil {
				return false, "", err
			}
			*t.db = db
		}
		ob, err := (*t.db).Outbox(t.table)
		if err != nil {
			return false, "", err
		}
		st, err := ob.Stats(ctx)
		if err != nil {
			return false, "", err
		}
		if st.New+st.Sending > 0 {
			return false, fmt.Sprintf("%s: %d new, %d sending", t.name, st.New, st.Sending), nil
		}
	}
	q, err := s.broker.quiet(ctx, final)
	if err != nil || q {
		return q, "", err
	}
	return false, "the broker: " + s.broker.pending(ctx), nil
}

// quietDBs are the pools quiet counts with, opened at the first check
// and kept for the settle (a fresh connection each 100 ms cost more
// database CPU than the counts).
type quietDBs struct{ orders, points *shop.DB }

func (d *quietDBs) close() {
	for _, db := range []*shop.DB{d.orders, d.points} {
		if db != nil {
			db.Close()
		}
	}
}

// settle heals every fault, restarts what is down without crash points,
// and waits until the system is quiet for a second.
func (s *system) settle(ctx context.Context) error {
	s.px.heal()
	if err := s.broker.heal(ctx); err != nil {
		return err
	}
	for _, p := range s.procs {
		_ = p.Signal(syscall.SIGCONT)
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.Settle)
	defer cancel()
	supErr := make(chan error, 1)
	supCtx, stopSup := context.WithCancel(ctx)
	defer stopSup()
	go func() { supErr <- s.supervise(supCtx, nil) }()
	var since time.Time
	left := "nothing checked yet" // what the last check found left to do
	dbs := &quietDBs{}
	defer dbs.close()
	for {
		select {
		case err := <-supErr:
			return err
		case <-ctx.Done():
			return fmt.Errorf("the system did not go quiet within the settle time (%s); last: %s\n%s",
				s.o.Settle, left, s.procReport())
		case <-time.After(100 * time.Millisecond):
		}
		if !s.ordersDone() {
			since, left = time.Time{}, "the order services have not finished"
			continue
		}
		// Quiet for a second by the cheap check, then by the final one.
		final := !since.IsZero() && time.Since(since) > time.Second
		q, why, err := s.quiet(ctx, dbs, final)
		if err != nil {
			// A database or the broker may still be coming back.
			since, left = time.Time{}, "checking failed: "+err.Error()
			continue
		}
		switch {
		case !q:
			since, left = time.Time{}, why
		case final:
			return nil
		case since.IsZero():
			since = time.Now()
		}
	}
}

package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
)

// The log scenario: ferry relay --source log, which learns from the
// database's change log (MariaDB's binlog, PostgreSQL's logical
// replication) which events became NEW and claims them by id, next to the
// polling relay on the same server, in the same run. It needs a server
// that keeps such a log (Config.LogMySQLURL, LogPostgresURL).

// Default servers of the log scenario: the test bed's servers that keep a
// change log.
const (
	DefaultLogMySQLURL    = "mysql://root@127.0.0.1:3307/test"
	DefaultLogPostgresURL = "postgres://postgres@127.0.0.1:5433/test?sslmode=disable"
)

// The log scenario's producers in its drain: logProducers writers commit
// logPerTx events per transaction, as fast as they can.
const (
	logProducers = 4
	logPerTx     = 100
)

// Relays the log scenario compares.
const (
	RelayLog  = "log"
	RelayPoll = "poll"
)

// LogResult is the log scenario: the log relay (ferry relay --source log)
// and the polling relay (ferry relay with defaults) on the same server,
// both as processes where the run has a ferry binary, else in the bench's
// process (Processes false).
type LogResult struct {
	// Database is the server with a change log the scenario ran on.
	Database  string `json:"database"`
	Processes bool   `json:"processes"`
	// RawBroker is the raw publish rate the drains are compared with
	// (the raw-broker scenario's, or measured here when it did not run).
	RawBroker float64 `json:"raw_broker_per_second"`
	Window    int     `json:"window"`
	// LiveRate is the live load's target rate, events per second.
	LiveRate int `json:"live_rate"`
	// Live: one event per transaction at Config.LiveRate, commit →
	// delivery at a consumer, for the log relay and the polling relay.
	Live     *LiveResult `json:"live,omitempty"`
	LivePoll *LiveResult `json:"live_poll,omitempty"`
	// Drain: the relay runs first; then Producers writers commit Events
	// events, PerTx per transaction, as fast as they can; measured from
	// the first commit to the last event SENT. ProducersAlone is the same
	// production with no relay: its rate bounds the drains', its database
	// CPU and statements per event are what the drains' include of the
	// producers' own work.
	Events         int         `json:"events"`
	Producers      int         `json:"producers"`
	PerTx          int         `json:"events_per_transaction"`
	Drain          RelayFigure `json:"drain"`
	DrainPoll      RelayFigure `json:"drain_poll"`
	ProducersAlone RelayFigure `json:"producers_alone"`
	// Idle is a log relay process with default settings on an empty
	// table; nil without a ferry binary.
	Idle *IdleResult `json:"idle,omitempty"`
}

// logServer is the URL of the server with a change log for the dialect
// of the bench's database, or why there is none.
func (c Config) logServer(dialect string) (string, error) {
	switch dialect {
	case "mysql":
		return c.LogMySQLURL, nil
	case "postgres":
		return c.LogPostgresURL, nil
	}
	return "", fmt.Errorf("%s keeps no change log a relay can read", dialect)
}

// openLogTarget opens the bench's tables on the server at url and checks
// that its log can be read: the feed's own setup check (which creates
// PostgreSQL's publication and slot, dropped again by Close).
func openLogTarget(ctx context.Context, url, prefix string) (*Target, error) {
	t, err := OpenTarget(ctx, url, prefix)
	if err != nil {
		return nil, err
	}
	table := t.Store.Table()
	if !slices.Contains(t.tables, table+"_lease") {
		t.tables = append(t.tables, table+"_lease") // the log relay's lease and checkpoint
	}
	feed, err := open.Feed(url, table, &open.FeedConfig{})
	if err != nil {
		t.Close()
		return nil, err
	}
	if pg, ok := feed.(interface {
		Slot() string
		Publication() string
	}); ok {
		// A slot nobody reads makes the server keep WAL without end.
		slot, pub := pg.Slot(), pg.Publication()
		t.closes = append([]func(){func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = t.DB.ExecContext(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
			_, _ = t.DB.ExecContext(ctx, "DROP PUBLICATION IF EXISTS "+t.quote(pub))
		}}, t.closes...)
	}
	if err := feed.Check(ctx); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// runLog runs the log scenario on the server with a change log for t's
// dialect. It returns a reason, and no error, when it is skipped: SQLite,
// or a server that cannot be reached or keeps no log, unless required.
func runLog(ctx context.Context, cfg Config, dialect, prefix string, b *Broker, rawBroker float64, say func(string, ...any)) (*LogResult, string, error) {
	url, err := cfg.logServer(dialect)
	if err != nil {
		return nil, "log relay: " + err.Error(), nil
	}
	lt, err := openLogTarget(ctx, url, prefix)
	if err != nil {
		if cfg.RequireLog || os.Getenv("FERRY_REQUIRE_SERVICES") == "1" { // testenv.EnvRequire, which the command must not link
			return nil, "", fmt.Errorf("the log relay needs a server with a change log at %s (--log-mysql-url, --log-postgres-url): %w",
				ferrytype.RedactURL(url), err)
		}
		return nil, fmt.Sprintf("log relay: no server with a change log at %s (--log-mysql-url, --log-postgres-url): %v",
			ferrytype.RedactURL(url), ferrytype.RedactError(err, url)), nil
	}
	defer lt.Close()
	lt.Aggregates = cfg.Aggregates
	res := &LogResult{Database: lt.Dialect + " " + lt.version(ctx), Processes: cfg.RelayBinary != "", Window: cfg.Window, LiveRate: cfg.LiveRate,
		Events: cfg.Events, Producers: logProducers, PerTx: min(logPerTx, cfg.Events)}
	// The servers' CPU by process tree: a machine may run a server
	// without a log beside this one, under the same command name.
	m := newTreeMeter(url, cfg.BrokerURL)
	run := func(relay string) relayStarter {
		if cfg.RelayBinary != "" {
			var args []string
			if relay == RelayLog {
				args = []string{"--source", "log"}
			}
			if cfg.Lanes > 0 {
				args = append(args, "--lanes", fmt.Sprint(cfg.Lanes))
			}
			if cfg.Batch != 100 {
				args = append(args, "--batch-size", fmt.Sprint(cfg.Batch))
			}
			return processStarter(cfg.RelayBinary, cfg.RelayEnv, lt, b, args...)
		}
		return inProcessStarter(lt, b, url, relay == RelayLog, cfg.Lanes, cfg.Batch)
	}
	how := map[bool]string{true: "process", false: "in-process"}[res.Processes]

	res.RawBroker = rawBroker
	if res.RawBroker <= 0 {
		var rates []float64
		for range cfg.Repeat {
			if err := b.Purge(ctx); err != nil {
				return res, "", err
			}
			took, err := b.Raw(ctx, cfg.Events, cfg.Window)
			if err != nil {
				return res, "", fmt.Errorf("raw broker: %w", err)
			}
			rates = append(rates, float64(cfg.Events)/took.Seconds())
		}
		slices.Sort(rates)
		res.RawBroker = rates[len(rates)/2]
		say("log: raw broker: %.0f msg/s (window %d)", res.RawBroker, cfg.Window)
	}

	for _, relay := range []string{RelayLog, RelayPoll} {
		start := run(relay)
		var started *startedRelay
		l, err := live(ctx, lt, b, cfg.LiveRate, cfg.LiveFor, relay+" "+how, nil, func(ctx context.Context, _ *latencies) (func() error, error) {
			r, err := start(ctx)
			if err != nil {
				return nil, err
			}
			started = r
			return func() error { _, _, err := r.stop(); return err }, nil
		})
		if err != nil {
			if started != nil && started.output() != "" {
				err = fmt.Errorf("%w; the relay printed: %s", err, started.output())
			}
			return res, "", fmt.Errorf("log: live, %s relay: %w", relay, err)
		}
		if relay == RelayLog {
			res.Live = &l
		} else {
			res.LivePoll = &l
		}
		say("log: live, %s relay (%s): %.0f events/s, commit→delivery p50 %s p99 %s max %s", relay, how, l.Rate, ms(l.P50), ms(l.P99), ms(l.Max))
	}

	median := func(fn func() (drainRun, error)) (drainRun, error) { return medianDrain(cfg.Repeat, fn) }
	p, err := median(func() (drainRun, error) { return produceAlone(ctx, lt, b, cfg.Events, res.Producers, res.PerTx, m) })
	if err != nil {
		return res, "", fmt.Errorf("log: producers alone: %w", err)
	}
	res.ProducersAlone = RelayFigure{Rate: p.Rate, CPU: p.CPU, Statements: p.Statements}
	say("log: producers alone, %d writers, %d events per transaction: %.0f events/s, CPU µs/event %s, statements/event %s",
		res.Producers, res.PerTx, p.Rate, p.CPU, p.Statements)
	for _, relay := range []string{RelayLog, RelayPoll} {
		r, err := median(func() (drainRun, error) {
			return produceDrain(ctx, lt, b, cfg.Events, res.Producers, res.PerTx, run(relay), m)
		})
		if err != nil {
			return res, "", fmt.Errorf("log: drain, %s relay: %w", relay, err)
		}
		f := RelayFigure{Relays: 1, Rate: r.Rate, CPU: r.CPU, Statements: r.Statements}
		if relay == RelayLog {
			res.Drain = f
		} else {
			res.DrainPoll = f
		}
		say("log: drain behind the producers, %s relay (%s): %.0f events/s, CPU µs/event %s, statements/event %s", relay, how, r.Rate, r.CPU, r.Statements)
	}

	if cfg.RelayBinary != "" {
		if err := lt.resetLog(ctx); err != nil {
			return res, "", err
		}
		idle, err := idleProcess(ctx, lt, b, cfg.RelayBinary, cfg.RelayEnv, cfg.IdleFor, "--source", "log")
		if err != nil {
			return res, "", fmt.Errorf("log: idle: %w", err)
		}
		res.Idle = &idle
		say("log: idle log relay process: %s", idle)
	}
	return res, "", nil
}

// startedRelay is a relay the log scenario started; stop stops it and
// returns its CPU time since it started, where measured.
type startedRelay struct {
	stop func() (cpu time.Duration, measured bool, err error)
	// output is what a relay process printed so far.
	output func() string
}

// relayStarter starts a relay on the log scenario's table.
type relayStarter func(ctx context.Context) (*startedRelay, error)

// processStarter starts ferry relay processes with args added to the
// defaults; their CPU time is read from /proc while they run.
func processStarter(binary string, env []string, t *Target, b *Broker, args ...string) relayStarter {
	return func(ctx context.Context) (*startedRelay, error) {
		if err := t.resetLog(ctx); err != nil {
			return nil, err
		}
		cmd, out, err := relayProcess(ctx, binary, env, t, b, args...)
		if err != nil {
			return nil, err
		}
		pid := strconv.Itoa(cmd.Process.Pid)
		cpu0, _, ok0 := statCPU(pid)
		var once sync.Once
		var (
			cpu  time.Duration
			ok   bool
			werr error
		)
		return &startedRelay{output: func() string { return strings.TrimSpace(out.String()) }, stop: func() (time.Duration, bool, error) {
			once.Do(func() {
				cpu1, _, ok1 := statCPU(pid)
				cpu, ok = cpu1-cpu0, ok0 && ok1
				_ = cmd.Process.Signal(syscall.SIGTERM)
				if werr = cmd.Wait(); werr != nil {
					werr = fmt.Errorf("%w: %s", werr, strings.TrimSpace(out.String()))
				}
			})
			return cpu, ok, werr
		}}, nil
	}
}

// inProcessStarter starts a relay in the bench's process with default
// settings, reading the log of the server at url when log is set. Its CPU
// time is not told apart from the producers'.
func inProcessStarter(t *Target, b *Broker, url string, log bool, lanes, batch int) relayStarter {
	return func(ctx context.Context) (*startedRelay, error) {
		if err := t.resetLog(ctx); err != nil {
			return nil, err
		}
		cfg := &ferry.RelayConfig{Lanes: lanes, BatchSize: batch}
		if log {
			feed, err := open.Feed(url, t.Store.Table(), &open.FeedConfig{})
			if err != nil {
				return nil, err
			}
			cfg.Log.Feed = feed
		}
		pub, err := b.Publisher(ctx)
		if err != nil {
			return nil, err
		}
		r, err := ferry.NewRelay(t.Store, pub, cfg)
		if err == nil {
			err = r.Start(ctx)
		}
		if err != nil {
			pub.Close()
			return nil, err
		}
		var once sync.Once
		var serr error
		return &startedRelay{output: func() string { return "" }, stop: func() (time.Duration, bool, error) {
			once.Do(func() {
				serr = r.Stop(context.Background())
				pub.Close()
			})
			return 0, false, serr
		}}, nil
	}
}

// commitEvents has producers writers commit n events, perTx per
// transaction, as fast as they can, on t's table to b's destination.
func commitEvents(ctx context.Context, t *Target, b *Broker, n, producers, perTx int) error {
	ob, err := ferry.NewOutbox(t.Driver, nil)
	if err != nil {
		return err
	}
	txs := (n + perTx - 1) / perTx
	_, err = parallel(txs, producers, func(i int) error {
		first := (i - 1) * perTx
		evs := make([]ferry.Event, 0, perTx)
		for j := first; j < n && j < first+perTx; j++ {
			evs = append(evs, ferry.Event{AggregateType: "order", AggregateID: fmt.Sprint(j % t.aggregates(n)),
				Type: "OrderPaid", Destination: b.Dest, Payload: Payload})
		}
		return t.enqueueTx(ctx, ob, evs)
	})
	return err
}

// produceAlone measures the log drain's production with no relay.
func produceAlone(ctx context.Context, t *Target, b *Broker, n, producers, perTx int, m *meter) (drainRun, error) {
	if err := t.truncate(ctx); err != nil {
		return drainRun{}, err
	}
	c := m.start(ctx, t)
	if err := commitEvents(ctx, t, b, n, producers, perTx); err != nil {
		return drainRun{}, err
	}
	run := c.stop(ctx, n, 0, false)
	return run, t.truncate(ctx)
}

// produceDrain starts a relay, waits until it relayed a first event, then
// has producers commit n events, perTx per transaction, as fast as they
// can, and measures from the first commit to the last event SENT: the
// rate, each party's CPU per event (the database's includes the
// producers' own work) and the database's statements per event.
func produceDrain(ctx context.Context, t *Target, b *Broker, n, producers, perTx int, start relayStarter, m *meter) (drainRun, error) {
	if err := t.truncate(ctx); err != nil {
		return drainRun{}, err
	}
	if err := b.Purge(ctx); err != nil {
		return drainRun{}, err
	}
	var delivered atomic.Int64
	stopConsumer, err := b.Consume(ctx, func(string, time.Time) { delivered.Add(1) })
	if err != nil {
		return drainRun{}, fmt.Errorf("consume: %w", err)
	}
	defer stopConsumer()
	r, err := start(ctx)
	if err != nil {
		return drainRun{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _, _ = r.stop()
		}
	}()
	// One event first, outside the figures: the relay is up (and a log
	// relay reads the log) once it is delivered.
	if err := commitEvents(ctx, t, b, 1, 1, 1); err != nil {
		return drainRun{}, err
	}
	if err := waitFor(ctx, time.Minute, func() (bool, error) { return delivered.Load() >= 1, nil }); err != nil {
		return drainRun{}, fmt.Errorf("the relay did not start: %w; it printed: %s", err, r.output())
	}
	c := m.start(ctx, t)
	if err := commitEvents(ctx, t, b, n, producers, perTx); err != nil {
		return drainRun{}, err
	}
	if err := waitFor(ctx, time.Minute, func() (bool, error) { return delivered.Load() >= int64(n+1), nil }); err != nil {
		return drainRun{}, fmt.Errorf("%d of %d events delivered: %w", delivered.Load()-1, n, err)
	}
	q := "SELECT COUNT(*) FROM " + t.quote(t.Store.Table()) + " WHERE status = 'SENT'"
	if err := waitFor(ctx, time.Minute, func() (bool, error) {
		var sent int
		err := t.DB.QueryRowContext(ctx, q).Scan(&sent)
		return sent >= n+1, err
	}); err != nil {
		return drainRun{}, fmt.Errorf("events SENT: %w", err)
	}
	// The relay's CPU up to the last SENT, without its stop.
	stopped = true
	cpu, measured, err := r.stop()
	if err != nil {
		return drainRun{}, fmt.Errorf("stop the relay: %w", err)
	}
	return c.stop(ctx, n, cpu, measured), nil
}

// resetLog forgets the log relay's checkpoint, so that each relay run
// reads the log from its end as a first start does, not the transactions
// of the runs before it (whose events the bench removed since).
func (t *Target) resetLog(ctx context.Context) error {
	if _, err := t.DB.ExecContext(ctx, "DELETE FROM "+t.quote(t.Store.Table()+"_lease")+
		" WHERE name = '"+ferrystore.LeaseLog+"'"); err != nil {
		return fmt.Errorf("reset the log checkpoint: %w", err)
	}
	return nil
}

// waitFor polls done every 2ms until it is true, fails, or limit passes.
func waitFor(ctx context.Context, limit time.Duration, done func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := done()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// newTreeMeter measures the database server as the process listening on
// dbURL's port and its descendants, rather than every process of its
// command name.
func newTreeMeter(dbURL, brokerURL string) *meter {
	m := newMeter(dbURL, brokerURL)
	if pid := localServerPID(dbURL); pid != "" {
		m.db, m.dbRoot = "", pid
	}
	return m
}

// treeCPU reads the CPU time of root and its descendants.
func treeCPU(root string) procCPU {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[string]string{}
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		if ppid, ok := statPPID(e.Name()); ok {
			parent[e.Name()] = ppid
		}
	}
	out := procCPU{}
	for pid := range parent {
		for p, hops := pid, 0; p != "" && hops < 64; p, hops = parent[p], hops+1 {
			if p == root {
				if c, _, ok := statCPU(pid); ok {
					out[pid] = c
				}
				break
			}
		}
	}
	return out
}

// statPPID reads a process's parent from /proc/<pid>/stat.
func statPPID(pid string) (string, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return "", false
	}
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return "", false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 2 {
		return "", false
	}
	return f[1], true
}

// logTargets are the log relay's goals, each with this run's figure.
func (r *Report) logTargets() []Ratio {
	l := r.Log
	if l == nil {
		return nil
	}
	dialect, _, _ := strings.Cut(l.Database, " ")
	var out []Ratio
	add := func(name string, v float64, ok bool, target float64, atMost bool, note string) {
		x := Ratio{Name: name, Target: target, AtMost: atMost, Note: note}
		if !ok {
			x.Note = strings.TrimPrefix(x.Note+"; not measured", "; ")
			out = append(out, x)
			return
		}
		x.Value = v
		x.judge()
		out = append(out, x)
	}
	how := "ferry relay processes"
	if !l.Processes {
		how = "relays in the bench's process (no ferry binary)"
	}
	live, poll := l.Live, l.LivePoll
	liveOK := live != nil && poll != nil
	add(fmt.Sprintf("live at %d ev/s, log relay: commit→delivery p50, ms (%s)", l.LiveRate, dialect), msOrZero(live, false), live != nil, 3, true, how)
	add(fmt.Sprintf("live at %d ev/s, log relay: commit→delivery p99, ms (%s)", l.LiveRate, dialect), msOrZero(live, true), live != nil, 15, true, how)
	add("live p50, log relay / polling relay", func() float64 {
		if !liveOK || poll.P50 <= 0 {
			return 0
		}
		return float64(live.P50) / float64(poll.P50)
	}(), liveOK && poll.P50 > 0, 0, false, fmt.Sprintf("%s / %s ms", fmtMS(live), fmtMS(poll)))
	drainOK := l.Drain.Rate > 0
	add(fmt.Sprintf("drain behind producers, log relay / raw publish (window %d)", l.Window), l.Drain.Rate/max(l.RawBroker, 1e-9),
		drainOK && l.RawBroker > 0, 0.8, false, fmt.Sprintf("%.0f / %.0f ev/s", l.Drain.Rate, l.RawBroker))
	add("drain behind producers, log relay / polling relay", l.Drain.Rate/max(l.DrainPoll.Rate, 1e-9), drainOK && l.DrainPoll.Rate > 0, 2, false,
		fmt.Sprintf("%.0f / %.0f ev/s; producers alone %.0f", l.Drain.Rate, l.DrainPoll.Rate, l.ProducersAlone.Rate))
	logDB, pollDB := l.Drain.CPU.DB, l.DrainPoll.CPU.DB
	cpuOK := logDB != nil && pollDB != nil && *pollDB > 0
	add(fmt.Sprintf("database CPU per event, log relay / polling relay (%s)", dialect), func() float64 {
		if !cpuOK {
			return 0
		}
		return *logDB / *pollDB
	}(), cpuOK, 0.3, true, fmt.Sprintf("%s / %s µs, both with the producers' own (alone: %s µs)", fmtPtr(logDB), fmtPtr(pollDB),
		fmtPtr(l.ProducersAlone.CPU.DB)))
	idleQ := l.Idle != nil && l.Idle.QueriesPerSecond != nil
	add("idle log relay: queries/s", func() float64 {
		if !idleQ {
			return 0
		}
		return *l.Idle.QueriesPerSecond
	}(), idleQ, 1, true, "no polling: a probe per --log-poll-interval (5s), the heartbeat, the log lease and checkpoint")
	add("idle log relay: % of a core", func() float64 {
		if l.Idle == nil {
			return 0
		}
		return l.Idle.CPUPercent
	}(), l.Idle != nil, 0, false, "")
	return out
}

func msOrZero(l *LiveResult, p99 bool) float64 {
	if l == nil {
		return 0
	}
	if p99 {
		return msOf(l.P99)
	}
	return msOf(l.P50)
}

func fmtMS(l *LiveResult) string {
	if l == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", msOf(l.P50))
}

func fmtPtr(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.0f", *v)
}

// writeLog writes the log scenario's figures and its targets.
func (r *Report) writeLog(w io.Writer, row func(name, value string)) {
	l := r.Log
	if l == nil {
		return
	}
	how := "ferry relay processes with defaults, the log relay with --source log"
	if !l.Processes {
		how = "relays in the bench's process with defaults (no ferry binary)"
	}
	fmt.Fprintf(w, "\nlog relay: %s; %s\n", l.Database, how)
	for _, x := range []*LiveResult{l.Live, l.LivePoll} {
		if x != nil {
			row(fmt.Sprintf("live, one event per tx, %s relay: rate; p50 / p99 / max", strings.Fields(x.Mode)[0]),
				fmt.Sprintf("%.0f ev/s; %s / %s / %s", x.Rate, ms(x.P50), ms(x.P99), ms(x.Max)))
		}
	}
	fmt.Fprintf(w, "  drain behind producers: the relay runs first; %d writers commit %d events, %d per transaction, as fast as they can;\n"+
		"  first commit → last event SENT. CPU µs/event: database / broker / relay; statements per event\n", l.Producers, l.Events, l.PerTx)
	for _, f := range []struct {
		name string
		f    RelayFigure
	}{{"producers alone, no relay", l.ProducersAlone}, {"log relay", l.Drain}, {"polling relay", l.DrainPoll}} {
		row(f.name, fmt.Sprintf("%.0f ev/s; %s; %s", f.f.Rate, f.f.CPU.split(), f.f.Statements.detail()))
	}
	if l.Idle != nil {
		row("idle log relay process", l.Idle.String())
	}
	if len(r.LogTargets) == 0 {
		return
	}
	fmt.Fprintln(w, "\ntargets for the log relay (ferry relay --source log)")
	for _, x := range r.LogTargets {
		v := "n/a"
		switch {
		case x.Met != nil:
			cmp, verdict := "≥", "met"
			if x.AtMost {
				cmp = "≤"
			}
			if !*x.Met {
				verdict = "MISSED"
			}
			v = fmt.Sprintf("%.2f  (target %s %.2f: %s)", x.Value, cmp, x.Target, verdict)
		case x.Target == 0 && !strings.HasSuffix(x.Note, "not measured"):
			v = fmt.Sprintf("%.2f", x.Value)
		}
		if x.Note != "" {
			v += "  [" + x.Note + "]"
		}
		fmt.Fprintf(w, "  %-72s %s\n", x.Name, v)
	}
}

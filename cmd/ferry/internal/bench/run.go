// Package bench measures ferry against the raw limits of the same machine,
// in one process and one run: the broker's client library publishing with
// confirms, the database running the relay's claim and mark statements, the
// relay draining and under a steady load, the producer's and the
// consumer's transactions with and without ferry, and claims on a large
// retained table. Every figure of ferry comes with the raw figure it is a
// fraction of. It backs the ferry bench command and the Go benchmarks.
package bench

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/ferrydev/ferry/ferrytype"
)

// Scenarios, in the order Run runs them.
const (
	ScenarioRawBroker = "raw-broker"
	ScenarioRawDB     = "raw-db"
	ScenarioRelay     = "relay"
	ScenarioPlain     = "plain"
	ScenarioLive      = "live"
	ScenarioIdle      = "idle"
	ScenarioProducer  = "producer"
	ScenarioInbox     = "inbox"
	ScenarioClaim     = "claim"
	ScenarioLog       = "log"
)

// AllScenarios lists every scenario.
var AllScenarios = []string{ScenarioRawBroker, ScenarioRawDB, ScenarioRelay, ScenarioPlain, ScenarioLive, ScenarioIdle, ScenarioLog, ScenarioProducer, ScenarioInbox, ScenarioClaim}

// Config configures a run. Zero values take the defaults.
type Config struct {
	DatabaseURL, BrokerURL string
	// Scenarios to run; default all.
	Scenarios []string
	// Events drained by the raw and relay scenarios. Default 20,000.
	Events int
	// Aggregates the drained events belong to. Default 1,000.
	Aggregates int
	// Repeat runs each throughput figure this often and reports the
	// median. Default 3.
	Repeat int
	// Batch is the claim size of the relay and of the raw claims. Default 100.
	Batch int
	// Window is the raw publisher's outstanding confirms. Default 1000.
	Window int
	// Relays are the relay counts to drain with. Default 1, 4 and 8.
	Relays []int
	// Lanes per relay; 0: the relay's default.
	Lanes int
	// LiveRate (events/s) and LiveFor: the live scenario's load. Default
	// 1,000/s for 10s.
	LiveRate int
	LiveFor  time.Duration
	// IdleFor is the idle scenario's window. Default 20s.
	IdleFor time.Duration
	// Retained SENT rows for the claim scenario. Default 1,000,000.
	Retained int
	// ClaimRounds is how many claims each claim latency is measured
	// over. Default 200.
	ClaimRounds int
	// ProducerTxs and InboxOps size the producer and consumer runs.
	// Defaults 3,000 and 4,000.
	ProducerTxs, InboxOps int
	// QueueType of the RabbitMQ queue. Default "quorum".
	QueueType string
	// RelayBinary is a ferry binary: the relay and live scenarios also
	// run it as ferry relay processes with their default settings, as
	// users deploy it. Empty skips those figures. RelayEnv is added to the
	// processes' environment.
	RelayBinary string
	RelayEnv    []string
	// PlainPoll is how often the plain relay looks for events in the live
	// scenario. Default 10ms.
	PlainPoll time.Duration
	// LogMySQLURL and LogPostgresURL are the servers the log scenario runs
	// on, for a MySQL or a PostgreSQL DatabaseURL: they must keep a change
	// log (MariaDB/MySQL binlog in ROW format; PostgreSQL
	// wal_level=logical). Defaults DefaultLogMySQLURL and
	// DefaultLogPostgresURL.
	LogMySQLURL, LogPostgresURL string
	// RequireLog makes an unreachable log server, or one without a log,
	// an error; otherwise the log scenario is skipped, with the reason in
	// Report.Skipped (FERRY_REQUIRE_SERVICES=1 requires it too).
	RequireLog bool
}

func (c Config) withDefaults() Config {
	if len(c.Scenarios) == 0 {
		c.Scenarios = AllScenarios
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Events, 20000)
	def(&c.Aggregates, DefaultAggregates)
	def(&c.Repeat, 3)
	def(&c.Batch, 100)
	def(&c.Window, 1000)
	def(&c.LiveRate, 1000)
	def(&c.Retained, 1000000)
	def(&c.ClaimRounds, 200)
	def(&c.ProducerTxs, 3000)
	def(&c.InboxOps, 4000)
	if c.IdleFor <= 0 {
		c.IdleFor = 20 * time.Second
	}
	if c.LiveFor <= 0 {
		c.LiveFor = 10 * time.Second
	}
	if len(c.Relays) == 0 {
		c.Relays = []int{1, 4, 8}
	}
	if c.PlainPoll <= 0 {
		c.PlainPoll = 10 * time.Millisecond
	}
	if c.QueueType == "" {
		c.QueueType = "quorum"
	}
	if c.LogMySQLURL == "" {
		c.LogMySQLURL = DefaultLogMySQLURL
	}
	if c.LogPostgresURL == "" {
		c.LogPostgresURL = DefaultLogPostgresURL
	}
	return c
}

// RelayFigure is one relay drain: the median run's rate and each party's
// CPU time per event in that run.
type RelayFigure struct {
	// Relays is the number of relays, processes or plain relay loops.
	Relays  int     `json:"relays"`
	Ordered bool    `json:"ordered"`
	Rate    float64 `json:"events_per_second"`
	CPU     CPU     `json:"cpu"`
	// Statements are the database server's statements per event.
	Statements Statements `json:"statements"`
}

// Ratio is one of ferry's figures as a fraction of its raw limit.
type Ratio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// Target, when set, is the goal: at least Target, or at most when
	// AtMost.
	Target float64 `json:"target,omitempty"`
	AtMost bool    `json:"at_most,omitempty"`
	Met    *bool   `json:"met,omitempty"`
	// Note says why a figure was not measured (Value is then 0) or what
	// it was measured on.
	Note string `json:"note,omitempty"`
}

// judge sets Met from Value against Target, when there is a target.
func (x *Ratio) judge() {
	if x.Target > 0 {
		met := x.Value >= x.Target
		if x.AtMost {
			met = x.Value <= x.Target
		}
		x.Met = &met
	}
}

// Report is everything one run measured.
type Report struct {
	Date     time.Time `json:"date"`
	Go       string    `json:"go"`
	CPUs     int       `json:"cpus"`
	Database string    `json:"database"`
	Broker   string    `json:"broker,omitempty"`
	Events   int       `json:"events"`
	// Aggregates the drained events belong to.
	Aggregates int `json:"aggregates"`
	Batch      int `json:"batch"`
	Repeat     int `json:"repeat"`
	// Tables is the name the run's tables (and broker queues) start with;
	// they are dropped when it ends.
	Tables string `json:"tables"`

	// RawBroker: messages/s published with confirms by the client alone.
	RawBroker float64 `json:"raw_broker_per_second,omitempty"`
	// RawDB: events/s claimed and marked SENT with no broker, by as many
	// loops as the largest relay count.
	RawDB    float64 `json:"raw_db_per_second,omitempty"`
	RawLoops int     `json:"raw_db_loops,omitempty"`
	// Relay: drains by relays in the bench's process; RelayProcess: by
	// ferry relay --drain processes with default settings; Plain: by the
	// plain hand-written relay's loops.
	Relay        []RelayFigure `json:"relay,omitempty"`
	RelayProcess []RelayFigure `json:"relay_process,omitempty"`
	Plain        []RelayFigure `json:"plain,omitempty"`
	// Live: the relay in the bench's process, woken by the producers;
	// LiveProcess: a ferry relay process with default settings;
	// LivePlain: the plain relay polling every PlainPoll.
	Live        *LiveResult `json:"live,omitempty"`
	LiveProcess *LiveResult `json:"live_process,omitempty"`
	LivePlain   *LiveResult `json:"live_plain,omitempty"`
	// Idle is a ferry relay process with default settings on an empty
	// table.
	Idle *IdleResult `json:"idle,omitempty"`
	// Log is the log relay next to the polling relay, on a server that
	// keeps a change log; LogTargets its goals with this run's figures.
	Log        *LogResult `json:"log,omitempty"`
	LogTargets []Ratio    `json:"log_targets,omitempty"`
	// Skipped says why figures were not measured.
	Skipped  []string         `json:"skipped,omitempty"`
	Producer []ProducerResult `json:"producer,omitempty"`
	Inbox    []InboxResult    `json:"inbox,omitempty"`
	Claim    *ClaimResult     `json:"claim,omitempty"`
	Ratios   []Ratio          `json:"ratios"`
	// Targets are the project's goals for the relay as deployed, each with
	// the figure this run measured.
	Targets []Ratio `json:"targets"`
}

// Run runs cfg's scenarios and reports each figure to progress as it
// completes. It creates its own tables, queue and stream and removes them.
// When a scenario fails, Run returns the error with a report of the
// scenarios completed before it.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	cfg = cfg.withDefaults()
	for _, s := range cfg.Scenarios {
		if !slices.Contains(AllScenarios, s) {
			return nil, fmt.Errorf("%w: unknown scenario %q (want %s)", ferrytype.ErrInvalidConfig, s, strings.Join(AllScenarios, ", "))
		}
	}
	want := func(s string) bool { return slices.Contains(cfg.Scenarios, s) }
	needBroker := want(ScenarioRawBroker) || want(ScenarioRelay) || want(ScenarioPlain) || want(ScenarioLive) ||
		(want(ScenarioIdle) && cfg.RelayBinary != "") || want(ScenarioLog)
	if needBroker && cfg.BrokerURL == "" {
		return nil, fmt.Errorf("%w: the raw-broker, relay, plain, live and log scenarios need a broker: set --broker-url", ferrytype.ErrInvalidConfig)
	}
	rep := &Report{Date: time.Now().UTC(), Go: runtime.Version(), CPUs: runtime.NumCPU(), Events: cfg.Events, Aggregates: cfg.Aggregates, Batch: cfg.Batch, Repeat: cfg.Repeat}
	name := "ferry_bench_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	rep.Tables = name
	t, err := OpenTarget(ctx, cfg.DatabaseURL, name)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	t.Aggregates = cfg.Aggregates
	rep.Database = t.Dialect + " " + t.version(ctx)
	var b *Broker
	if needBroker {
		if b, err = OpenBroker(ctx, cfg.BrokerURL, strings.ReplaceAll(name, "_", "-"), cfg.QueueType); err != nil {
			return nil, err
		}
		defer b.Close()
		rep.Broker = b.version()
	}
	say := func(format string, args ...any) { fmt.Fprintf(progress, format+"\n", args...) }
	median := func(fn func() (float64, error)) (float64, error) {
		var got []float64
		for range cfg.Repeat {
			v, err := fn()
			if err != nil {
				return 0, err
			}
			got = append(got, v)
		}
		slices.Sort(got)
		return got[len(got)/2], nil
	}
	// The raw claim+mark loops: as many as the relays the targets are
	// set for (4) when they run, else the most relays.
	rawLoops := slices.Max(cfg.Relays)
	if slices.Contains(cfg.Relays, 4) {
		rawLoops = 4
	}
	m := newMeter(cfg.DatabaseURL, cfg.BrokerURL)
	drains := func(fn func() (drainRun, error)) (drainRun, error) { return medianDrain(cfg.Repeat, fn) }
	figure := func(n int, ordered bool, r drainRun) RelayFigure {
		return RelayFigure{Relays: n, Ordered: ordered, Rate: r.Rate, CPU: r.CPU, Statements: r.Statements}
	}
	if cfg.RelayBinary == "" && (want(ScenarioRelay) || want(ScenarioLive)) {
		rep.Skipped = append(rep.Skipped, "ferry relay as its own process: no ferry binary to run")
	}

	if want(ScenarioRawBroker) {
		if rep.RawBroker, err = median(func() (float64, error) {
			if err := b.Purge(ctx); err != nil {
				return 0, err
			}
			took, err := b.Raw(ctx, cfg.Events, cfg.Window)
			return float64(cfg.Events) / took.Seconds(), err
		}); err != nil {
			return rep.partial(), fmt.Errorf("raw broker: %w", err)
		}
		say("raw broker: %.0f msg/s (window %d)", rep.RawBroker, cfg.Window)
	}
	if want(ScenarioRawDB) {
		rep.RawLoops = rawLoops
		if rep.RawDB, err = median(func() (float64, error) { return RawDB(ctx, t, cfg.Events, rawLoops, cfg.Batch) }); err != nil {
			return rep.partial(), fmt.Errorf("raw database: %w", err)
		}
		say("raw claim+mark: %.0f events/s (%d loops, batch %d)", rep.RawDB, rawLoops, cfg.Batch)
	}
	if want(ScenarioRelay) {
		for _, ordered := range []bool{false, true} {
			for _, n := range cfg.Relays {
				spec := RelaySpec{Relays: n, Ordered: ordered, Lanes: cfg.Lanes, Batch: cfg.Batch}
				r, err := drains(func() (drainRun, error) { return drainInProcess(ctx, t, b, cfg.Events, spec, m) })
				if err != nil {
					return rep.partial(), fmt.Errorf("relay drain: %w", err)
				}
				rep.Relay = append(rep.Relay, figure(n, ordered, r))
				say("relay: %d relay(s), ordered=%v: %.0f events/s, CPU µs/event %s, statements/event %s", n, ordered, r.Rate, r.CPU, r.Statements)
				if cfg.RelayBinary == "" {
					continue
				}
				if r, err = drains(func() (drainRun, error) {
					return drainProcesses(ctx, t, b, cfg.Events, spec, cfg.RelayBinary, cfg.RelayEnv, m)
				}); err != nil {
					return rep.partial(), fmt.Errorf("relay process drain: %w", err)
				}
				rep.RelayProcess = append(rep.RelayProcess, figure(n, ordered, r))
				say("relay: %d ferry relay process(es), ordered=%v: %.0f events/s, CPU µs/event %s (start, not counted: %s a process), statements/event %s",
					n, ordered, r.Rate, r.CPU, r.StartCPU.Round(time.Millisecond), r.Statements)
			}
		}
	}
	if want(ScenarioPlain) {
		for _, n := range cfg.Relays {
			r, err := drains(func() (drainRun, error) { return drainPlain(ctx, t, b, cfg.Events, n, cfg.Batch, m) })
			if err != nil {
				return rep.partial(), fmt.Errorf("plain relay drain: %w", err)
			}
			rep.Plain = append(rep.Plain, figure(n, false, r))
			say("plain relay: %d loop(s): %.0f events/s, CPU µs/event %s, statements/event %s", n, r.Rate, r.CPU, r.Statements)
		}
	}
	if want(ScenarioLive) {
		sayLive := func(l LiveResult) {
			say("live, %s: %.0f events/s, commit→delivery p50 %s p99 %s max %s", l.Mode, l.Rate, ms(l.P50), ms(l.P99), ms(l.Max))
		}
		live, err := Live(ctx, t, b, cfg.LiveRate, cfg.LiveFor, 1, cfg.Lanes)
		if err != nil {
			return rep.partial(), fmt.Errorf("live: %w", err)
		}
		rep.Live = &live
		sayLive(live)
		if cfg.RelayBinary != "" {
			l, err := liveProcess(ctx, t, b, cfg.LiveRate, cfg.LiveFor, cfg.RelayBinary, cfg.RelayEnv, RelaySpec{Lanes: cfg.Lanes, Batch: cfg.Batch})
			if err != nil {
				return rep.partial(), fmt.Errorf("live: %w", err)
			}
			rep.LiveProcess = &l
			sayLive(l)
		}
		l, err := livePlain(ctx, t, b, cfg.LiveRate, cfg.LiveFor, cfg.PlainPoll, cfg.Batch)
		if err != nil {
			return rep.partial(), fmt.Errorf("live: %w", err)
		}
		rep.LivePlain = &l
		sayLive(l)
	}
	if want(ScenarioIdle) && cfg.RelayBinary != "" {
		idle, err := idleProcess(ctx, t, b, cfg.RelayBinary, cfg.RelayEnv, cfg.IdleFor)
		if err != nil {
			return rep.partial(), fmt.Errorf("idle: %w", err)
		}
		rep.Idle = &idle
		say("idle ferry relay process: %s", idle)
	}
	if want(ScenarioLog) {
		l, skipped, err := runLog(ctx, cfg, t.Dialect, name+"_log", b, rep.RawBroker, say)
		rep.Log = l
		if err != nil {
			return rep.partial(), fmt.Errorf("log relay: %w", err)
		}
		if skipped != "" {
			rep.Skipped = append(rep.Skipped, skipped)
			say("%s", skipped)
		}
	}
	if want(ScenarioProducer) {
		for _, w := range []int{1, 16} {
			p, err := Producer(ctx, t, cfg.ProducerTxs, w)
			if err != nil {
				return rep.partial(), fmt.Errorf("producer: %w", err)
			}
			rep.Producer = append(rep.Producer, p)
			say("producer, %d writer(s): business %.0f, hand INSERT %.0f, EnqueueTx %.0f, EnqueueTx no sequence %.0f tx/s",
				w, p.Business, p.Hand, p.Enqueue, p.NoSeq)
		}
	}
	if want(ScenarioInbox) {
		for _, w := range []int{1, 8} {
			in, err := Inbox(ctx, t, cfg.InboxOps, w)
			if err != nil {
				return rep.partial(), fmt.Errorf("inbox: %w", err)
			}
			rep.Inbox = append(rep.Inbox, in)
			say("consumer, %d worker(s): bare %.0f, inbox %.0f ops/s", w, in.Bare, in.Inbox)
		}
	}
	if want(ScenarioClaim) {
		c, err := Claim(ctx, t, cfg.Retained, cfg.Batch, cfg.ClaimRounds)
		if err != nil {
			return rep.partial(), fmt.Errorf("claim: %w", err)
		}
		rep.Claim = &c
		say("claim of %d: empty p50 %s p99 %s; with %d SENT rows p50 %s p99 %s", c.Batch,
			ms(c.EmptyP50), ms(c.EmptyP99), c.Retained, ms(c.FullP50), ms(c.FullP99))
	}
	rep.Ratios = rep.ratios()
	rep.Targets = rep.targets()
	rep.LogTargets = rep.logTargets()
	return rep, nil
}

// partial completes the report of the scenarios measured so far.
func (r *Report) partial() *Report {
	r.Ratios = r.ratios()
	r.Targets = r.targets()
	r.LogTargets = r.logTargets()
	return r
}

// ratios computes each of ferry's figures as a fraction of its raw limit,
// with the project's targets where it has one.
func (r *Report) ratios() []Ratio {
	var out []Ratio
	add := func(name string, v, target float64, atMost bool) {
		x := Ratio{Name: name, Value: v, Target: target, AtMost: atMost}
		x.judge()
		out = append(out, x)
	}
	best := func(ordered bool) (RelayFigure, bool) {
		var f RelayFigure
		for _, x := range r.Relay {
			if x.Ordered == ordered && x.Relays >= f.Relays {
				f = x
			}
		}
		return f, f.Relays > 0
	}
	dialect, _, _ := strings.Cut(r.Database, " ")
	for _, ordered := range []bool{false, true} {
		f, ok := best(ordered)
		if !ok {
			continue
		}
		mode := "unordered"
		if ordered {
			mode = "ordered"
		}
		if r.RawDB > 0 {
			var target float64
			if dialect == "mysql" && !ordered && strings.HasPrefix(r.Broker, "rabbitmq") {
				target = 0.8
			}
			add(fmt.Sprintf("relay (%d, %s) / raw claim+mark", f.Relays, mode), f.Rate/r.RawDB, target, false)
		}
		if r.RawBroker > 0 {
			var target float64
			if dialect == "postgres" && !ordered && strings.HasPrefix(r.Broker, "rabbitmq") {
				target = 0.5
			}
			add(fmt.Sprintf("relay (%d, %s) / raw publish", f.Relays, mode), f.Rate/r.RawBroker, target, false)
		}
		if r.RawDB > 0 && r.RawBroker > 0 {
			add(fmt.Sprintf("relay (%d, %s) / min(raw publish, raw claim+mark)", f.Relays, mode), f.Rate/min(r.RawDB, r.RawBroker), 0, false)
		}
	}
	if r.Live != nil {
		add(fmt.Sprintf("commit→delivery p99 at %.0f/s, in-process relay, ms", r.Live.Rate), float64(r.Live.P99)/float64(time.Millisecond), 5, true)
	}
	out = append(out, r.plainRatios()...)
	for _, p := range r.Producer {
		add(fmt.Sprintf("EnqueueTx / hand INSERT, %d writer(s)", p.Writers), p.Enqueue/p.Hand, 0.95, false)
		add(fmt.Sprintf("EnqueueTx without sequence / hand INSERT, %d writer(s)", p.Writers), p.NoSeq/p.Hand, 0.95, false)
	}
	for _, in := range r.Inbox {
		add(fmt.Sprintf("inbox / bare, %d worker(s)", in.Workers), in.Inbox/in.Bare, 0.7, false)
	}
	if c := r.Claim; c != nil && c.EmptyP99 > 0 {
		add(fmt.Sprintf("claim p99 with %d SENT rows / empty", c.Retained), float64(c.FullP99)/float64(c.EmptyP99), 1.5, true)
	}
	return out
}

// WriteText writes the report as aligned tables.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "ferry bench, %s, %s, %d CPUs\n", r.Date.Format("2006-01-02 15:04 MST"), r.Go, r.CPUs)
	fmt.Fprintf(w, "database: %s\n", r.Database)
	if r.Broker != "" {
		fmt.Fprintf(w, "broker:   %s\n", r.Broker)
	}
	fmt.Fprintf(w, "%d events per drain (%d aggregates), batch %d, median of %d\n\n", r.Events, max(min(r.Aggregates, r.Events), 1), r.Batch, r.Repeat)
	row := func(name, value string) { fmt.Fprintf(w, "  %-66s %14s\n", name, value) }
	per := func(v float64, unit string) string { return fmt.Sprintf("%.0f %s", v, unit) }
	if r.RawBroker > 0 || r.RawDB > 0 || len(r.Relay) > 0 {
		fmt.Fprintln(w, "throughput")
	}
	if r.RawBroker > 0 {
		row("raw publish with confirms (client library alone)", per(r.RawBroker, "msg/s"))
	}
	if r.RawDB > 0 {
		row(fmt.Sprintf("raw claim + mark SENT, %d loops, no broker", r.RawLoops), per(r.RawDB, "ev/s"))
	}
	for _, f := range r.Relay {
		mode := "unordered"
		if f.Ordered {
			mode = "ordered"
		}
		row(fmt.Sprintf("relay, %d relay(s), %s", f.Relays, mode), per(f.Rate, "ev/s"))
	}
	r.writeDeployed(w, row)
	if len(r.Producer) > 0 {
		fmt.Fprintln(w, "\nproducer: committed tx/s")
		for _, p := range r.Producer {
			row(fmt.Sprintf("%d writer(s): business only", p.Writers), per(p.Business, "tx/s"))
			row(fmt.Sprintf("%d writer(s): + hand-written outbox INSERT", p.Writers), per(p.Hand, "tx/s"))
			row(fmt.Sprintf("%d writer(s): + EnqueueTx", p.Writers), per(p.Enqueue, "tx/s"))
			row(fmt.Sprintf("%d writer(s): + EnqueueTx, SkipSequence", p.Writers), per(p.NoSeq, "tx/s"))
		}
	}
	if len(r.Inbox) > 0 {
		fmt.Fprintln(w, "\nconsumer: committed ops/s")
		for _, in := range r.Inbox {
			row(fmt.Sprintf("%d worker(s): bare business UPDATE", in.Workers), per(in.Bare, "ops/s"))
			row(fmt.Sprintf("%d worker(s): inbox + business UPDATE", in.Workers), per(in.Inbox, "ops/s"))
		}
	}
	if c := r.Claim; c != nil {
		fmt.Fprintf(w, "\nclaim of %d events, latency p50 / p99\n", c.Batch)
		row("empty outbox", ms(c.EmptyP50)+" / "+ms(c.EmptyP99))
		row(fmt.Sprintf("with %d SENT rows retained", c.Retained), ms(c.FullP50)+" / "+ms(c.FullP99))
	}
	if len(r.Ratios) > 0 {
		fmt.Fprintln(w, "\nratios")
		for _, x := range r.Ratios {
			v := fmt.Sprintf("%.2f", x.Value)
			if x.Met != nil {
				cmp, verdict := "≥", "met"
				if x.AtMost {
					cmp = "≤"
				}
				if !*x.Met {
					verdict = "MISSED"
				}
				v += fmt.Sprintf("  (target %s %.2f: %s)", cmp, x.Target, verdict)
			}
			fmt.Fprintf(w, "  %-66s %s\n", x.Name, v)
		}
	}
	r.writeTargets(w)
	r.writeLog(w, func(name, value string) { fmt.Fprintf(w, "  %-66s %14s\n", name, value) })
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func (t *Target) version(ctx context.Context) string {
	q := "SELECT VERSION()"
	if t.Dialect == "sqlite" {
		q = "SELECT sqlite_version()"
	}
	var v sql.NullString
	if err := t.DB.QueryRowContext(ctx, q).Scan(&v); err != nil {
		return "(version unknown)"
	}
	s, _, _ := strings.Cut(v.String, " on ")
	return s
}

// medianDrain runs a drain repeat times and keeps the run with the median
// rate.
func medianDrain(repeat int, fn func() (drainRun, error)) (drainRun, error) {
	var got []drainRun
	for range repeat {
		r, err := fn()
		if err != nil {
			return r, err
		}
		got = append(got, r)
	}
	slices.SortFunc(got, func(a, b drainRun) int { return cmp.Compare(a.Rate, b.Rate) })
	return got[len(got)/2], nil
}

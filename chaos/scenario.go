package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/ferrydev/ferry/examples/shop"
)

// Scenario is one kind of fault, applied while the order services place
// their orders.
type Scenario struct {
	Name  string
	About string
	// DBs and Brokers the fault applies to; empty means all (but Kafka:
	// see KafkaDB).
	DBs, Brokers []string
	// Network: the processes reach the databases and the broker through
	// proxies (toxiproxy) the scenario's faults put toxics on. Without
	// it, they connect directly.
	Network bool
	// KafkaDB is the one database the scenario runs on with Kafka; empty:
	// the scenario does not run on Kafka. One database per scenario keeps
	// the Kafka rows to a few minutes: MariaDB for the faults of
	// processes and of the broker (kill, crashpoints, pause,
	// broker-restart, duplicate-storm, poison), PostgreSQL for network,
	// payments and consumer-pause (a Kafka group's fault: Brokers keeps
	// it off the others). commit-reset is a database fault the other
	// brokers' rows show.
	KafkaDB string
	// LogOnly: the scenario is a fault of the log relay's log, run only
	// with Options.LogRelay (TestLogRelayScenarios), never in the polling
	// relay's matrix.
	LogOnly bool
	// ClusterOnly: the scenario is a fault of replicated servers (a
	// database pair, Options.Failover; a broker cluster,
	// Options.Cluster), run only on them (TestClusterScenarios), never
	// in the polling relay's matrix.
	ClusterOnly bool
	// first gives a process its extra arguments at its first start.
	first func(s *system, p *shop.Proc) []string
	// arm gives a process its extra arguments at each restart.
	arm func(s *system, p *shop.Proc) []string
	// setup runs before the processes start.
	setup func(s *system) error
	// faults runs during the load, until ctx ends.
	faults func(ctx context.Context, s *system)
	// storm runs next to the order services' load (the duplicate storm).
	storm func(ctx context.Context, s *system) error
	// expect adds the scenario's own non-vacuity conditions.
	expect func(r *Result) []string
}

// Applies reports whether the scenario runs on db and broker.
func (sc *Scenario) Applies(db, broker string) bool {
	if sc.LogOnly || sc.ClusterOnly {
		return false
	}
	if broker == "kafka" {
		return sc.KafkaDB == db
	}
	return (len(sc.DBs) == 0 || slices.Contains(sc.DBs, db)) && (len(sc.Brokers) == 0 || slices.Contains(sc.Brokers, broker))
}

// InSuite reports whether the test suite's reduced matrix runs the
// scenario on db and broker: every database and every broker the scenario
// applies to, not every pair of them. A RabbitMQ row is left out where
// its database already runs the scenario with Kafka (KafkaDB), so the
// scenario runs on RabbitMQ with the other SQL database: kill on
// PostgreSQL + RabbitMQ and MariaDB + Kafka, network on MariaDB + RabbitMQ
// and PostgreSQL + Kafka. A scenario without Kafka (commit-reset) keeps
// both its RabbitMQ rows. The full matrix is Applies.
func (sc *Scenario) InSuite(db, broker string) bool {
	return sc.Applies(db, broker) && !(broker == "amqp" && db == sc.KafkaDB)
}

// every runs fn at random intervals around d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) { after(ctx, d/2+rand.N(d), d, fn) }

// after calls fn once after first, then every d/2..3d/2, until ctx ends.
func after(ctx context.Context, first, d time.Duration, fn func()) {
	wait := first
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		fn()
		wait = d/2 + rand.N(d)
	}
}

func (s *system) kill(p *shop.Proc, why string) {
	if !p.Running() {
		return
	}
	s.mu.Lock()
	s.kills++
	s.killed[p]++
	s.mu.Unlock()
	_ = p.Signal(syscall.SIGKILL)
	s.say("SIGKILL %s (%s)", p.Name, why)
}

func pick(ps []*shop.Proc) *shop.Proc { return ps[rand.IntN(len(ps))] }

// stormBase offsets the storm's order ids from the order services'.
const stormBase = shop.StormBase

// Scenarios are the suite, in the order the issue lists the faults.
var Scenarios = []*Scenario{
	{
		Name:    "kill",
		KafkaDB: "mysql",
		About:   "SIGKILL a random relay every ~2 s and a random consumer every ~5 s; each is started again after a short pause",
		faults: func(ctx context.Context, s *system) {
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				every(ctx, 2*time.Second, func() { s.kill(pick(s.byPrefix("relay")), "every ~2s") })
			}()
			go func() {
				defer wg.Done()
				every(ctx, 5*time.Second, func() {
					s.kill(pick(append(s.byPrefix("points"), s.byPrefix("sms")...)), "every ~5s")
				})
			}()
			wg.Wait()
		},
		expect: func(r *Result) []string {
			if r.Counters.Kills == 0 {
				return []string{"vacuous: no process was killed"}
			}
			return nil
		},
	},
	{
		Name:    "crashpoints",
		KafkaDB: "mysql",
		About:   "every process start draws a named crash point (order committed; claim done; published, not confirmed; confirmed, not marked; consumer committed, not acked; inside the consumer transaction) and is killed there",
		first:   func(_ *system, p *shop.Proc) []string { return randomCrash(p) },
		arm:     func(_ *system, p *shop.Proc) []string { return randomCrash(p) },
	},
	{
		Name:    "pause",
		KafkaDB: "mysql",
		About:   "a relay stops itself (SIGSTOP) between the broker's answer and its outcome write, stays stopped until its lease ran out and the batch was swept, then goes on: its late mark must change nothing",
		first:   func(s *system, p *shop.Proc) []string { return s.pauseArgs(p) },
		arm:     func(s *system, p *shop.Proc) []string { return s.pauseArgs(p) },
		faults:  func(ctx context.Context, s *system) { s.pauseRelays(ctx) },
		expect:  pauseExpect,
	},
	{
		Name:    "consumer-pause",
		Brokers: []string{"kafka"},
		KafkaDB: "postgres",
		About: "a Kafka points consumer stops (SIGSTOP) past its group's session timeout, the group gives its partitions " +
			"to the other member, then it goes on (SIGCONT) with the records it had fetched: each effect must still " +
			"be applied once",
		faults: func(ctx context.Context, s *system) { s.pauseConsumers(ctx) },
		expect: func(r *Result) []string {
			if r.Counters.ConsumerPauses == 0 {
				return []string{"vacuous: no consumer was held stopped past its session timeout"}
			}
			return nil
		},
	},
	{
		Name:    "network",
		KafkaDB: "postgres",
		Network: true,
		About:   "toxiproxy between the processes and the databases and broker: connection resets, black holes, latency",
		faults: func(ctx context.Context, s *system) {
			toxics := []struct{ kind, attrs string }{
				{"reset_peer", `{"timeout":0}`},
				{"timeout", `{"timeout":0}`},
				{"latency", `{"latency":80,"jitter":40}`},
			}
			i := 0
			every(ctx, 2*time.Second, func() {
				t := toxics[i%len(toxics)]
				target := []string{"db", "broker"}[rand.IntN(2)]
				if s.o.DB == "sqlite" {
					target = "broker"
				}
				i++
				if err := s.px.toxic(target, t.kind, t.attrs); err != nil {
					s.say("toxic failed: %v", err)
					return
				}
				s.mu.Lock()
				s.toxics++
				s.mu.Unlock()
				s.say("toxic %s on %s for 1.5s", t.kind, target)
				select {
				case <-ctx.Done():
				case <-time.After(1500 * time.Millisecond):
				}
				s.px.heal()
			})
		},
		expect: func(r *Result) []string {
			if r.Counters.Toxics == 0 {
				return []string{"vacuous: no toxic was applied"}
			}
			return nil
		},
	},
	{
		Name:    "broker-restart",
		KafkaDB: "mysql",
		About: "the broker is stopped and started mid-run (RabbitMQ: rabbitmqctl stop_app / start_app on the tests' own node, " +
			"never a shared server; Kafka: the kfake process " +
			"stopped with SIGTERM, its state kept in its directory, and started again)",
		Brokers: []string{"amqp", "kafka"},
		faults: func(ctx context.Context, s *system) {
			// The first restart comes within a second or two, so that it
			// lands while orders are still placed however fast the run is.
			after(ctx, time.Second, 6*time.Second, func() {
				s.say("broker: stop")
				if err := s.broker.restart(ctx, 2*time.Second); err != nil {
					s.say("broker restart failed: %v", err)
					return
				}
				s.mu.Lock()
				s.brokerRestarts++
				s.mu.Unlock()
				s.say("broker: started again")
			})
		},
		expect: func(r *Result) []string {
			if r.Counters.BrokerRestarts == 0 {
				return []string{"vacuous: the broker was never restarted"}
			}
			return nil
		},
	},
	{
		Name:  "commit-reset",
		About: "5% of the database COMMITs of the order services and consumers lose their connection before the answer: outcome unknown to the client",
		DBs:   []string{"mysql", "postgres"},
		setup: func(s *system) error {
			for _, p := range s.procs {
				if role(p) != "relay" {
					p.Env = append(p.Env, shop.EnvCommitResetPct+"=5")
				}
			}
			return nil
		},
		expect: func(r *Result) []string {
			if r.Counters.UnknownCommits == 0 {
				return []string{"vacuous: no COMMIT was cut off"}
			}
			return nil
		},
	},
	{
		Name:    "duplicate-storm",
		KafkaDB: "mysql",
		About:   "each paid order is published three times at once, under three message ids, to two points consumers",
		storm: func(ctx context.Context, s *system) error {
			db, err := shop.Open(ctx, s.ordersDirect)
			if err != nil {
				return err
			}
			defer db.Close()
			// The storm's payments: committed orders (the ground truth), in
			// an id range of their own, announced by the storm only.
			for id := stormBase + 1; id <= stormBase+s.o.Orders; id++ {
				if _, err := db.ExecContext(ctx, db.Q("INSERT INTO shop_order (id, user_id, amount, status) VALUES (?, ?, ?, 'PAID')"),
					id, id%shop.Users+1, id%97+1); err != nil {
					return err
				}
			}
			var wg sync.WaitGroup
			errs := make(chan error, 3)
			for copy := 0; copy < 3; copy++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for id := stormBase + 1; id <= stormBase+s.o.Orders; id++ {
						body, _ := json.Marshal(shop.PaidPayload{OrderID: int64(id), UserID: int64(id%shop.Users + 1), Amount: int64(id%97 + 1)})
						if err := s.broker.publishPaid(ctx, "storm-"+strconv.Itoa(copy)+"-"+strconv.Itoa(id), body); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			return <-errs
		},
		expect: func(r *Result) []string {
			// Two copies of each storm operation are duplicates for each of
			// the two consumer groups: 4 per operation. The counters of a
			// killed consumer lose their last interval, so they are lower
			// bounds; half is certain. The storm's real test is the
			// checker's: one effect per operation.
			if want := int64(2 * r.Orders); r.Counters.DuplicatesAbsorbed < want {
				return []string{fmt.Sprintf("storm: %d duplicates absorbed, want at least %d", r.Counters.DuplicatesAbsorbed, want)}
			}
			return nil
		},
	},
	{
		Name:    "payments",
		KafkaDB: "postgres",
		About: "the order services' payment calls time out and are retried with their Idempotency-Key (some payments take 200-400 ms, " +
			"a first attempt waits 150 ms); the payments server is killed inside a payment's transaction and after a commit, before its answer, in turn",
		setup: func(s *system) error {
			slow := "5"
			if s.o.DB == "sqlite" {
				slow = "2" // each slow payment holds SQLite's one write lock
			}
			for _, p := range s.byPrefix("payments") {
				p.Args = append(p.Args, "--slow-pct", slow)
			}
			return nil
		},
		first: func(s *system, p *shop.Proc) []string { return s.paymentCrash(p) },
		arm:   func(s *system, p *shop.Proc) []string { return s.paymentCrash(p) },
		expect: func(r *Result) []string {
			var out []string
			if r.Report.PaymentRetries == 0 || r.Report.PaymentReplays == 0 {
				out = append(out, fmt.Sprintf("vacuous: %d payment retries, %d replays", r.Report.PaymentRetries, r.Report.PaymentReplays))
			}
			if r.Report.KeyTakeovers == 0 {
				out = append(out, "vacuous: no idempotency key was taken over from a killed request")
			}
			return out
		},
	},
	{
		Name:    "poison",
		KafkaDB: "mysql",
		About:   "1% of the payments carry an undecodable payload and 1% are announced twice with another amount: only those are parked",
	},
}

// ScenarioByName returns the named scenario.
// LogGap is the log relay's own fault: the log loses the relays'
// checkpoint while they run. On MariaDB every relay is killed, the binlog
// flushed and purged up to its current file, so that the relay started
// again finds its checkpoint's file gone; on PostgreSQL the reading
// relay's walsender is ended and the replication slot dropped under it.
// Either way the relay must say so and claim from the table: the checker
// finds every order's effects once.
var LogGap = &Scenario{
	Name:    "log-gap",
	LogOnly: true,
	About:   "the binlog purged past the log relays' checkpoint (MariaDB, the relays killed first) or their replication slot dropped under the reader (PostgreSQL), every ~3 s after a relay found the last one",
	faults: func(ctx context.Context, s *system) {
		every(ctx, 3*time.Second, func() {
			seen := s.logGapsSeen()
			var err error
			switch s.o.DB {
			case "mysql":
				err = s.purgeBinlog(ctx)
			case "postgres":
				err = s.dropSlot(ctx)
			default:
				return
			}
			if err != nil {
				s.say("log gap failed: %v", err)
				return
			}
			s.mu.Lock()
			s.logGaps++
			s.mu.Unlock()
			// The next gap waits until a relay found this one (or a
			// generous bound passed): on a loaded machine the relays
			// started again may take the log lease only after the next
			// kill, and a run whose every purge came too soon would
			// find no gap at all.
			deadline := time.Now().Add(30 * time.Second)
			for s.logGapsSeen() == seen && time.Now().Before(deadline) {
				select {
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	},
	expect: func(r *Result) []string {
		if r.Counters.LogGaps == 0 {
			return []string{"vacuous: the log never lost the checkpoint"}
		}
		return nil
	},
}

// awaitCheckpoint waits until the log relays stored a checkpoint (the
// position of the lease 'log' in the orders database), for at most 30s: a
// purge before the first one goes under nothing, the relays started again
// read from the log's end, and the row finds no gap.
func (s *system) awaitCheckpoint(ctx context.Context) error {
	db, err := sql.Open("mysql", dsnFor(s.ordersDirect))
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var pos string
		err := db.QueryRowContext(ctx, "SELECT position FROM outbox_event_lease WHERE name = 'log'").Scan(&pos)
		switch {
		case err == nil && pos != "":
			return nil
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("read the log relays' checkpoint: %w", err)
		case time.Now().After(deadline):
			return errors.New("the log relays stored no checkpoint in 30s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logGapsSeen is the number of gaps the relays reported so far.
func (s *system) logGapsSeen() int64 {
	var n int64
	for _, p := range s.byPrefix("relay") {
		n += p.Total().LogGaps
	}
	return n
}

// purgeBinlog kills the relays, then flushes the binlog and purges every
// file before the new one: the relays started again resume from a
// checkpoint whose file is gone.
func (s *system) purgeBinlog(ctx context.Context) error {
	if err := s.awaitCheckpoint(ctx); err != nil {
		return err
	}
	for _, p := range s.byPrefix("relay") {
		s.kill(p, "log-gap: the binlog goes under the checkpoint")
	}
	db, err := sql.Open("mysql", dsnFor(s.o.MySQLURL))
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "FLUSH BINARY LOGS"); err != nil {
		return err
	}
	var file string
	var pos int64
	var doDB, ignoreDB sql.NullString
	if err := db.QueryRowContext(ctx, "SHOW MASTER STATUS").Scan(&file, &pos, &doDB, &ignoreDB); err != nil {
		return err
	}
	// A binlog dump thread of a killed relay lingers until the server
	// finds its connection gone, and MariaDB purges no file such a thread
	// still reads (a warning, not an error): the purge is checked, and
	// those threads are ended until it takes.
	for attempt := 0; ; attempt++ {
		if _, err := db.ExecContext(ctx, "PURGE BINARY LOGS TO '"+file+"'"); err != nil {
			return err
		}
		first, err := firstBinlog(ctx, db)
		if err != nil {
			return err
		}
		if first == file {
			break
		}
		if attempt == 50 {
			return fmt.Errorf("the binlog still starts at %s after purging to %s", first, file)
		}
		if err := killBinlogDumps(ctx, db); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.say("binlog purged to %s under the log relays", file)
	return nil
}

// firstBinlog returns the oldest binlog file the server holds.
func firstBinlog(ctx context.Context, db *sql.DB) (string, error) {
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return "", err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", err
	}
	if !rows.Next() {
		return "", errors.Join(errors.New("SHOW BINARY LOGS returned no file"), rows.Err())
	}
	vals := make([]any, len(cols))
	var name string
	vals[0] = &name
	for i := 1; i < len(vals); i++ {
		vals[i] = new(sql.RawBytes)
	}
	if err := rows.Scan(vals...); err != nil {
		return "", err
	}
	return name, nil
}

// killBinlogDumps ends the server's binlog dump threads: with the relays
// killed, what is left are those of dead connections.
func killBinlogDumps(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, "SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'")
	if err != nil {
		return err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, id := range ids {
		// A thread may end on its own meanwhile: an unknown id is fine.
		_, _ = db.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
	}
	return nil
}

// dropSlot ends the walsender of the run's replication slot and drops
// the slot before the relay reads it again.
func (s *system) dropSlot(ctx context.Context) error {
	db, err := sql.Open("pgx", s.o.PostgresURL)
	if err != nil {
		return err
	}
	defer db.Close()
	var last error
	for range 200 {
		_, _ = db.ExecContext(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active", s.slot)
		if _, last = db.ExecContext(ctx, "SELECT pg_drop_replication_slot($1)", s.slot); last == nil {
			s.say("replication slot %s dropped under the log relay", s.slot)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return last
}

func ScenarioByName(name string) *Scenario {
	for _, sc := range append(Scenarios, LogGap) {
		if sc.Name == name {
			return sc
		}
	}
	return nil
}

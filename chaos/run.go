package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/ferrydev/ferry/examples/shop"
	"github.com/ferrydev/ferry/ferryfault"
)

// Counters are what a run absorbed: the evidence that its faults bit.
type Counters struct {
	UnknownConfirms    int64 `json:"unknown_confirms"`    // relay publishes whose outcome was unknown
	BrokerDuplicates   int64 `json:"broker_duplicates"`   // republished events the broker dropped (JetStream)
	DuplicatesAbsorbed int64 `json:"duplicates_absorbed"` // deliveries the inbox found already applied
	CrashPointsHit     int   `json:"crash_points_hit"`
	Kills              int   `json:"kills"`
	Pauses             int   `json:"pauses"`
	PauseMisses        int   `json:"pause_misses,omitempty"`    // armings no batch took in time
	PausesFenced       int   `json:"pauses_fenced,omitempty"`   // pauses whose late mark was seen fenced
	PausesUnfenced     int   `json:"pauses_unfenced,omitempty"` // pauses whose late mark was not
	ConsumerPauses     int   `json:"consumer_pauses,omitempty"` // consumers held stopped past their group's session timeout
	Toxics             int   `json:"toxics"`
	LogGaps            int   `json:"log_gaps,omitempty"`     // binlogs purged / slots dropped under the log relays
	Failovers          int   `json:"failovers,omitempty"`    // database primaries killed and replicas promoted
	NodeKills          int   `json:"node_kills,omitempty"`   // broker nodes killed (node-kill)
	LeaderMoves        int   `json:"leader_moves,omitempty"` // leads taken by another node after a kill
	// The log relays' events read from the log, and the gaps they found
	// (lower bounds: a killed relay's last interval is lost).
	LogEventsRead  int64 `json:"log_events_read,omitempty"`
	LogGapsSeen    int64 `json:"log_gaps_seen,omitempty"`
	BrokerRestarts int   `json:"broker_restarts"`
	Restarts       int   `json:"restarts"`
	Fenced         int64 `json:"fenced_marks"` // late marks that changed nothing
	Swept          int64 `json:"leases_swept"`
	UnknownCommits int64 `json:"unknown_commits"` // COMMITs cut off on the wire
	// Parked counts, per consumer group, the distinct events parked.
	Parked map[string]int `json:"parked"`
}

// Result is one scenario's run.
type Result struct {
	Scenario   string       `json:"scenario"`
	DB         string       `json:"db"`
	Broker     string       `json:"broker"`
	Orders     int          `json:"orders"`
	Duration   string       `json:"duration"`
	Report     *shop.Report `json:"report"`
	Counters   Counters     `json:"counters"`
	Violations []string     `json:"violations"`
	Events     []string     `json:"events,omitempty"`
}

// OK reports a run without violations.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

// Run runs one scenario and checks the result.
func Run(ctx context.Context, o Options, sc *Scenario) (*Result, error) {
	if o.Settle == 0 {
		o.Settle = 3 * time.Minute
	}
	if o.MinFaults == 0 {
		o.MinFaults = 10 * time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	s, err := newSystem(ctx, o, sc.Network)
	if err != nil {
		return nil, err
	}
	defer s.close()
	s.say("scenario %s on %s + %s: %d orders", sc.Name, o.DB, o.Broker, o.Orders)

	// Every scenario arms one crash point in a relay, one in a consumer
	// and one in the payments server, at their first start and at each
	// restart until it was hit (a SIGKILL can come first): no run is
	// without a crash, nor, on NATS, whose broker drops republished
	// events, without a redelivery the inbox absorbs.
	baseline := map[string][]string{
		"relay-1":    crashAt(ferryfault.RelayAfterPublish, 3+o.Orders/400),
		"points-1":   crashAt(ferryfault.ConsumerAfterHandle, 10+o.Orders/20),
		"payments-1": crashAt(ferryfault.HTTPAfterCommit, 5+o.Orders/100),
	}
	if sc.setup != nil {
		if err := sc.setup(s); err != nil {
			return nil, err
		}
	}
	for _, p := range s.procs {
		var args []string
		if sc.first != nil {
			args = sc.first(s, p)
		}
		if b, ok := baseline[p.Name]; ok && !slices.Contains(args, "--crash-at") {
			args = append(args, b...)
		}
		if err := p.Start(args...); err != nil {
			return nil, err
		}
	}

	// The load has no deadline of its own but ctx's: how long it takes
	// depends on the machine (each payments crash costs a restart, and
	// so on). What fails it is a stall: no order committed for
	// loadStall.
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	progress, err := s.orderProgress(ctx)
	if err != nil {
		return nil, err
	}
	defer progress.close()
	arm := func(s *system, p *shop.Proc) []string {
		var args []string
		if sc.arm != nil {
			args = sc.arm(s, p)
		}
		if b, ok := baseline[p.Name]; ok && !slices.Contains(args, "--crash-at") && !s.crashed(p) {
			args = append(args, b...)
		}
		return args
	}
	supErr := make(chan error, 1)
	go func() { supErr <- s.supervise(loadCtx, arm) }()
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		if sc.faults != nil {
			sc.faults(loadCtx, s)
		}
	}()
	if sc.storm != nil {
		if err := sc.storm(loadCtx, s); err != nil {
			stopLoad()
			return nil, fmt.Errorf("storm: %w", err)
		}
		s.say("storm published")
	}
	for !s.ordersDone() {
		select {
		case err := <-supErr:
			stopLoad()
			return nil, err
		case <-loadCtx.Done():
			return nil, fmt.Errorf("the order services did not finish (%s): %w", progress, loadCtx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		if stalled, err := progress.stalled(ctx); err != nil || stalled {
			stopLoad()
			if err == nil {
				err = fmt.Errorf("the order services stalled: %s", progress)
			}
			return nil, err
		}
	}
	s.say("orders placed")
	if rest := o.MinFaults - time.Since(s.start); rest > 0 {
		select {
		case <-time.After(rest):
		case err := <-supErr:
			stopLoad()
			return nil, err
		}
	}
	stopLoad()
	<-faultsDone
	if err := <-supErr; err != nil {
		return nil, err
	}
	s.say("faults stopped; healing and waiting for the system to go quiet")
	if err := s.settle(ctx); err != nil {
		return nil, err
	}
	s.say("quiet; stopping the processes")
	for _, p := range s.procs {
		p.Stop(20 * time.Second)
	}
	return s.check(ctx, sc)
}

func (s *system) check(ctx context.Context, sc *Scenario) (*Result, error) {
	r := &Result{Scenario: sc.Name, DB: s.o.DB, Broker: s.o.Broker, Orders: s.o.Orders,
		Duration: time.Since(s.start).Round(100 * time.Millisecond).String()}
	odb, err := shop.Open(ctx, s.ordersDirect)
	if err != nil {
		return nil, err
	}
	defer odb.Close()
	pdb, err := shop.Open(ctx, s.pointsDirect)
	if err != nil {
		return nil, err
	}
	defer pdb.Close()
	if r.Report, err = shop.Check(ctx, odb, pdb, s.gateway.Stats()); err != nil {
		return nil, err
	}
	c := &r.Counters
	deaths := 0
	for _, p := range s.procs {
		t := p.Total()
		c.UnknownConfirms += t.Unknown
		c.BrokerDuplicates += t.Dupes
		c.DuplicatesAbsorbed += t.Duplicate
		c.Fenced += t.Fenced
		c.Swept += t.Swept
		c.UnknownCommits += t.UnknownCommits
		c.LogEventsRead += t.LogEvents
		c.LogGapsSeen += t.LogGaps
		deaths += p.Deaths()
	}
	s.mu.Lock()
	c.Kills, c.Pauses, c.Toxics, c.BrokerRestarts, c.Restarts = s.kills, s.pauses, s.toxics, s.brokerRestarts, s.restarts
	c.LogGaps, c.Failovers = s.logGaps, s.failovers
	c.NodeKills, c.LeaderMoves = s.nodeKills, s.leaderMoves
	c.PauseMisses, c.PausesFenced, c.PausesUnfenced = s.pauseMisses, s.pausesFenced, s.pausesUnfenced
	c.ConsumerPauses = s.consumerPauses
	r.Events = append([]string{}, s.events...)
	s.mu.Unlock()
	c.CrashPointsHit = deaths - c.Kills
	parked, err := s.broker.parked(ctx)
	if err != nil {
		return nil, err
	}
	r.Violations = append(r.Violations, r.Report.Violations...)
	r.Violations = append(r.Violations, s.checkParked(ctx, parked, c)...)
	if c.UnknownConfirms == 0 {
		r.Violations = append(r.Violations, "vacuous: no unknown confirm")
	}
	if c.DuplicatesAbsorbed == 0 {
		r.Violations = append(r.Violations, "vacuous: no duplicate delivery absorbed")
	}
	if c.CrashPointsHit == 0 {
		r.Violations = append(r.Violations, "vacuous: no crash point hit")
	}
	if sc.expect != nil {
		r.Violations = append(r.Violations, sc.expect(r)...)
	}
	return r, nil
}

// String renders a result for people.
func (r *Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "== %s on %s + %s, %d orders, %s\n", r.Scenario, r.DB, r.Broker, r.Orders, r.Duration)
	b.WriteString(r.Report.String())
	c := r.Counters
	fmt.Fprintf(&b, "counters: unknown confirms %d, broker duplicates %d, duplicates absorbed by the inbox %d, crash points hit %d,\n"+
		"          kills %d, pauses %d (late marks seen fenced %d, armings withdrawn %d), toxics %d, broker restarts %d, restarts %d, fenced marks %d, leases swept %d, COMMITs cut off %d, parked %v\n",
		c.UnknownConfirms, c.BrokerDuplicates, c.DuplicatesAbsorbed, c.CrashPointsHit, c.Kills, c.Pauses, c.PausesFenced, c.PauseMisses, c.Toxics,
		c.BrokerRestarts, c.Restarts, c.Fenced, c.Swept, c.UnknownCommits, c.Parked)
	if c.NodeKills > 0 {
		fmt.Fprintf(&b, "          broker nodes faulted %d, leaders moved %d\n", c.NodeKills, c.LeaderMoves)
	}
	if c.Failovers > 0 {
		fmt.Fprintf(&b, "          database failovers %d\n", c.Failovers)
	}
	if c.ConsumerPauses > 0 {
		fmt.Fprintf(&b, "          consumers held stopped past their session timeout %d\n", c.ConsumerPauses)
	}
	if r.OK() {
		b.WriteString("RESULT: PASS\n")
	} else {
		fmt.Fprintf(&b, "RESULT: FAIL: %s\n", strings.Join(r.Violations, "; "))
	}
	return b.String()
}

// JSON renders results as a JSON report.
func JSON(results []*Result) ([]byte, error) { return json.MarshalIndent(results, "", "  ") }

// checkParked checks that each group parked exactly the injected poison
// and conflicting events: every parked event belongs to an order with an
// injected fault, and every injected fault was parked. Copies of one event
// (a relay may publish an event twice; RabbitMQ does not deduplicate) count
// once.
func (s *system) checkParked(ctx context.Context, parked map[string][]parkedMsg, c *Counters) []string {
	db, err := shop.Open(ctx, s.ordersDirect)
	if err != nil {
		return []string{fmt.Sprintf("read injected faults: %v", err)}
	}
	defer db.Close()
	injected := map[int64]bool{}
	rows, err := db.QueryContext(ctx, "SELECT order_id FROM shop_injected")
	if err != nil {
		return []string{fmt.Sprintf("read injected faults: %v", err)}
	}
	for rows.Next() {
		var id int64
		if rows.Scan(&id) == nil {
			injected[id] = true
		}
	}
	rows.Close()
	var out []string
	c.Parked = map[string]int{}
	for _, group := range []string{"points", "sms"} {
		events := map[string]bool{}
		orders := map[int64]bool{}
		for _, m := range parked[group] {
			events[m.ID] = true
			var p struct {
				OrderID int64 `json:"order_id"`
			}
			_ = json.Unmarshal(m.Body, &p)
			if !injected[p.OrderID] {
				out = append(out, fmt.Sprintf("%s parked event %s of order %d, which carried no injected fault", group, m.ID, p.OrderID))
			}
			orders[p.OrderID] = true
		}
		c.Parked[group] = len(events)
		for id := range injected {
			if !orders[id] {
				out = append(out, fmt.Sprintf("%s did not park the injected fault of order %d", group, id))
			}
		}
	}
	return out
}

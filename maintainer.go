package ferry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/runner"
)

// deadBeats is how many heartbeat intervals a relay may miss before it
// counts as dead: its claims are returned at once, and its lease of the
// table's maintenance, which lasts as long, has ended. A beat may wait
// beatWait intervals for a busy database: a relay whose beat waited that
// long and failed beats again at once, and that beat still lands before
// the relay counts as dead.
const (
	deadBeats = 4
	beatWait  = 2
)

// maintainer keeps a relay's table in order beside its lanes. It records
// the relay in the heartbeat table; it holds the table's maintenance lease
// (ferrystore.LeaseMaintenance) or waits for it, and while it holds it
// sweeps expired claims, returns at once the claims of relays that stopped
// beating, and prunes the rows of relays gone; from the rows of the relays
// alive it sets the lanes' share of the table; every relay with a
// retention purges SENT rows. It reads the lanes' state and the outage
// tracker for the heartbeat, and calls nothing of the relay's.
type maintainer struct {
	store ferrystore.Store
	// registry is the store's heartbeat table, nil when the relay does
	// not beat (Heartbeat.Interval negative): it then leads always, takes
	// no lease and no share.
	registry ferrystore.RelayRegistry
	lease    *lease // the table's maintenance lease
	cfg      *RelayConfig
	log      *slog.Logger
	hooks    *relayHooks
	c        *relayCounters
	state    *laneState
	outage   *outage
	source   string // the claim source's kind, for the heartbeat
	host     string
	// claims is the prefix of this relay's claim tokens
	// (RelayBeat.Claims).
	claims string

	// leading is true while this relay leads the table's maintenance:
	// while it holds the lease, always without a heartbeat table.
	leading atomic.Bool
	// returned holds the claim prefixes of the relays found dead whose
	// claims this relay returned, so that each is returned once; a
	// prefix goes once its relay beats again or its row is gone.
	returned map[string]bool
	// alive is how many relays alive that poll the table the last round
	// found (share).
	alive int64
}

func (m *maintainer) start(run *runner.Runner) {
	if m.registry == nil {
		m.leading.Store(true)
	}
	if m.cfg.SweepInterval > 0 {
		run.Go(func() {
			run.Every(m.cfg.SweepInterval, func() {
				if m.leading.Load() {
					m.sweep(run)
				}
			})
		})
	}
	if m.cfg.Retention > 0 {
		// Every relay with a retention purges, leader or not: retention
		// is set per relay, and electing it would let the leader's
		// setting turn it off for all; a purge that finds nothing is one
		// index read a minute.
		run.Go(func() { run.Every(m.cfg.PurgeInterval, func() { m.purge(run) }) })
	}
	if m.registry != nil {
		run.Go(func() { m.heartbeat(run) })
	}
}

// stop gives up the maintenance lease, so that another relay takes the
// lead at once, and deletes the relay's heartbeat row, once every
// goroutine of the relay ended: no beat comes after. ctx is the relay's
// work context.
func (m *maintainer) stop(ctx context.Context) {
	if m.registry == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if m.leading.Load() {
		if err := m.lease.release(ctx); err != nil {
			m.log.Warn("giving up the maintenance lease failed; another relay takes the lead when it ends", "error", err)
		}
	}
	m.forget(ctx)
}

// heartbeat records the relay in the heartbeat table as it starts, then
// every Heartbeat.Interval (the first rounds sooner) until Stop. After
// each beat it takes or renews the maintenance lease, reads the rows of
// the relays and sets the lanes' share from them; while it leads, it
// returns the claims of the relays found dead and deletes the rows of
// relays that stopped beating ForgetAfter ago, at once and then every
// ForgetAfter (at most hourly).
func (m *maintainer) heartbeat(run *runner.Runner) {
	hb := m.cfg.Heartbeat
	ctx := run.Context()
	pruneEvery := min(hb.ForgetAfter, time.Hour)
	var (
		lastPrune time.Time
		failing   beatFailures
		window    sentWindow
	)
	// Relays started together (a deploy, a scale-up) see each other's
	// first beats only at their next rounds, and a share rises only at a
	// round that finds as many relays alive as the one before (share):
	// the first rounds come sooner (after a twentieth of an interval, at
	// most 100 ms, then twice as long each time), so that each runs its
	// share well within a beat rather than one lane until its third.
	wait := max(min(hb.Interval/20, 100*time.Millisecond), min(hb.Interval, time.Millisecond))
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		sent := m.c.confirmed.Load()
		err := m.beat(ctx, sent, window.add(time.Now(), sent))
		failing.note(m.log, m.cfg.ID, err)
		m.lead(ctx)
		beats, rerr := m.relays(ctx)
		m.share(beats, rerr == nil)
		if m.leading.Load() && rerr == nil && err == nil {
			// A leader whose own beat failed judges no other relay dead:
			// the database that kept its beat out may keep theirs out
			// too.
			m.returnDead(run, beats)
		}
		if err == nil && m.leading.Load() && time.Since(lastPrune) >= pruneEvery {
			lastPrune = time.Now()
			m.prune(ctx)
		}
		select {
		case <-run.Stopping():
			return
		case <-t.C:
		}
		wait = min(2*wait, hb.Interval)
		t.Reset(wait)
	}
}

// lead takes or renews the maintenance lease, which lasts deadBeats
// intervals: while the relay that holds it beats, it keeps it; once that
// relay stops (it gives it up) or dies, the next relay to ask takes it. A
// relay whose request failed leads meanwhile: maintenance is safe to run
// twice, and not running it is not. A change is logged.
func (m *maintainer) lead(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(m.cfg.Heartbeat.Interval, time.Second))
	_, held, err := m.lease.acquire(ctx)
	cancel()
	lead := held || err != nil
	if m.leading.Swap(lead) == lead {
		return
	}
	switch {
	case lead && err != nil:
		m.log.Warn("taking the maintenance lease failed; maintaining the table meanwhile", "relay_id", m.cfg.ID, "error", err)
	case lead && m.cfg.SweepInterval < 0:
		m.log.Warn("this relay leads the table's maintenance but its sweeper is off (SweepInterval negative):"+
			" expired leases wait until a relay that sweeps leads", "relay_id", m.cfg.ID)
	case lead:
		m.log.Info("leading the table's maintenance: sweeping expired leases, returning the claims of relays gone, "+
			"pruning their rows", "relay_id", m.cfg.ID)
	default:
		m.log.Info("another relay leads the table's maintenance", "relay_id", m.cfg.ID)
	}
}

// relays reads the heartbeat rows.
func (m *maintainer) relays(ctx context.Context) ([]ferrystore.RelayBeat, error) {
	ctx, cancel := context.WithTimeout(ctx, max(m.cfg.Heartbeat.Interval, time.Second))
	defer cancel()
	return m.registry.Relays(ctx)
}

// share sets how many lanes this relay runs, from the rows of the relays
// alive that poll the table (ok: they could be read): of the table's
// TableLanes, each relay runs an equal share, the older relays (by start,
// then id) one more while the lanes do not divide evenly, at most its own
// Lanes. A relay whose share is 0 stands by: it claims nothing until a
// relay stops or dies. A relay starts with one lane; a round that finds
// another number of relays alive than the last lowers the share at once
// but raises it only at the next round that finds the same number. A
// relay that is not in the rows (its beats fail), or that cannot read
// them, runs all its lanes; so does a log relay, whose reader alone
// claims what the log tells of.
func (m *maintainer) share(beats []ferrystore.RelayBeat, ok bool) {
	all := int64(m.cfg.Lanes)
	if !ok || m.source != ferrystore.RelaySourceTable {
		m.state.setAllowed(all)
		return
	}
	now := time.Now()
	var alive []ferrystore.RelayBeat
	for _, b := range beats {
		if now.Sub(b.LastSeen) < m.deadAfter() && (b.Source == ferrystore.RelaySourceTable || b.Source == "") {
			alive = append(alive, b)
		}
	}
	slices.SortFunc(alive, func(a, b ferrystore.RelayBeat) int {
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), strings.Compare(a.ID, b.ID))
	})
	i := slices.IndexFunc(alive, func(b ferrystore.RelayBeat) bool { return b.ID == m.cfg.ID })
	if i < 0 {
		m.state.setAllowed(all)
		return
	}
	t, n := int64(m.cfg.TableLanes), int64(len(alive))
	share := min(t/n, all)
	if int64(i) < t%n {
		share = min(share+1, all)
	}
	if prev := m.alive; n != prev {
		// The relays alive changed since the last round: fewer lanes at
		// once, more only once a round saw the same number again.
		// Relays started together (a deploy, a scale-up) see each other's
		// rows over their first rounds, as each comes up; each starts
		// with one lane, and none runs more than its share of a number
		// that is still growing.
		m.alive = n
		share = min(share, m.state.allowed.Load())
	}
	if m.state.setAllowed(share) {
		m.log.Info("lanes set by the relays alive", "lanes", share, "relays", n, "table_lanes", t)
	}
}

// maintenanceLease is how long the maintenance lease lasts without
// renewal: as long as a relay may be silent before it is dead (deadBeats
// intervals), at least a second, so that a beat that comes a little late
// on a loaded machine does not hand the lead on.
func maintenanceLease(interval time.Duration) time.Duration {
	return max(deadBeats*interval, time.Second)
}

// deadAfter is how long a relay's last beat may be old before it is dead.
func (m *maintainer) deadAfter() time.Duration { return deadBeats * m.cfg.Heartbeat.Interval }

// beat writes the relay's row: one statement, given beatWait intervals
// (at least a second): a beat that waits for a busy database (a lock,
// SQLite's one writer) lands late rather than not at all, so that a relay
// alive is not taken for dead and its claims returned under it.
func (m *maintainer) beat(ctx context.Context, sent, lastMinute int64) error {
	hb := m.cfg.Heartbeat
	ctx, cancel := context.WithTimeout(ctx, max(beatWait*hb.Interval, time.Second))
	defer cancel()
	connected, cause := m.outage.state()
	err := m.registry.Beat(ctx, ferrystore.RelayBeat{
		ID: m.cfg.ID, Host: m.host, PID: os.Getpid(), Version: hb.Version, Broker: hb.Broker,
		Lanes: int(m.state.allowed.Load()), Ordered: m.cfg.Ordered, InFlight: m.state.inFlight.Load(),
		BrokerConnected: connected, BrokerError: cause, Sent: sent, SentLastMinute: lastMinute, Source: m.source,
		Claims: m.claims,
	})
	if err != nil {
		m.c.beatErrors.Add(1)
	} else {
		m.c.beats.Add(1)
	}
	m.hooks.heartbeat(err)
	return err
}

// prune deletes the rows of relays that stopped beating ForgetAfter ago.
func (m *maintainer) prune(ctx context.Context) {
	hb := m.cfg.Heartbeat
	ctx, cancel := context.WithTimeout(ctx, max(hb.Interval, time.Second))
	defer cancel()
	// Never its own row: on a slow database its last beat may already be
	// ForgetAfter old by the time the prune runs.
	n, err := m.registry.PruneRelays(ctx, hb.ForgetAfter, m.cfg.ID)
	switch {
	case err != nil:
		m.log.Warn("pruning the heartbeats of relays gone failed", "error", err)
	case n > 0:
		m.log.Info("forgot relays that stopped beating", "relays", n, "silent_for", hb.ForgetAfter)
	}
}

// forget deletes the relay's row as it stops, within a few seconds even
// when ctx was cancelled (Stop gave up waiting).
func (m *maintainer) forget(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := ferryfault.At(ctx, ferryfault.RelayBeforeForget); err != nil {
		m.log.Warn("fault before forget: heartbeat row left", "relay_id", m.cfg.ID, "error", err)
		return
	}
	if err := m.registry.ForgetRelay(ctx, m.cfg.ID); err != nil {
		m.log.Warn("deleting the relay's heartbeat row failed; it ages until pruned", "relay_id", m.cfg.ID, "error", err)
	}
}

// sweep returns expired claims, in bounded batches, through the retry
// policy: back to NEW after a delay, or DEAD past the attempt limit.
func (m *maintainer) sweep(run *runner.Runner) {
	_ = m.giveBack(run, "expired leases", "lease expired before an outcome was recorded",
		func(ctx context.Context) ([]ferrystore.Claimed, error) {
			return m.store.ExpiredClaims(ctx, m.cfg.SweepBatch)
		})
}

// returnDead returns at once the claims of the relays whose last beat is
// older than deadAfter, each relay's once, instead of waiting for their
// leases to end (RelayConfig.Lease): a relay that was killed holding
// claims has them published again within a few heartbeats. A relay that
// is not dead but only silent (its database connection lost, paused) may
// still publish what it claimed; its marks are fenced, as after an
// expired lease, and the consumers' inbox absorbs the duplicate.
func (m *maintainer) returnDead(run *runner.Runner, beats []ferrystore.RelayBeat) {
	now := time.Now()
	seen := make(map[string]bool, len(beats))
	for _, b := range beats {
		if b.Claims == "" || b.Claims == m.claims || b.ID == m.cfg.ID {
			continue
		}
		seen[b.Claims] = true
		silent := now.Sub(b.LastSeen)
		if silent < m.deadAfter() {
			delete(m.returned, b.Claims) // alive (again)
			continue
		}
		if m.returned[b.Claims] {
			continue
		}
		why := fmt.Sprintf("relay %s stopped beating %s ago; its claim was returned before its lease ended",
			b.ID, silent.Round(time.Second))
		if m.giveBack(run, "the claims of a relay that stopped beating", why,
			func(ctx context.Context) ([]ferrystore.Claimed, error) {
				return m.store.ClaimsOf(ctx, b.Claims, m.cfg.SweepBatch)
			},
			"dead_relay", b.ID, "silent_for", silent.Round(time.Millisecond)) {
			m.returned[b.Claims] = true
		}
	}
	for p := range m.returned {
		if !seen[p] {
			delete(m.returned, p) // its row was pruned
		}
	}
}

// giveBack returns the claims next finds, in bounded batches, through the
// retry policy, fenced by each claim's token: rows another relay or a
// person changed first are left as they are. why is each row's last
// error; what and attrs go into the log line of each batch. It reports
// whether it found them all (no error, no fault).
func (m *maintainer) giveBack(run *runner.Runner, what, why string,
	next func(ctx context.Context) ([]ferrystore.Claimed, error), attrs ...any) bool {
	ctx := run.Context()
	for {
		claims, err := next(ctx)
		if err != nil {
			m.c.errors.Add(1)
			m.log.Error("returning "+what+" failed", append(attrs, "error", err)...)
			return false
		}
		if len(claims) == 0 {
			return true
		}
		if err := ferryfault.At(ctx, ferryfault.RelayMidSweep); err != nil {
			m.log.Warn("fault mid-sweep: "+what+" left", append(attrs, "error", err)...)
			return false
		}
		fails := make([]ferrystore.Failure, len(claims))
		route := make(map[string]string, len(claims))
		for i, c := range claims {
			route[c.ID] = c.Destination
			delay, dead := m.cfg.Retry.Next(c.Attempts, ferrytype.Unknown(errors.New(why)))
			fails[i] = ferrystore.Failure{ID: c.ID, Token: c.Token, Dead: dead, Delay: delay,
				Error: fmt.Sprintf("attempt %d: unknown: %s", c.Attempts, why)}
		}
		res, err := m.store.MarkFailed(ctx, fails)
		if err != nil {
			m.c.errors.Add(1)
			m.log.Error("returning "+what+" failed", append(attrs, "error", err)...)
			return false
		}
		// Rows another sweeper or relay changed first are fenced: not
		// counted here.
		n := res.Changed()
		m.c.swept.Add(n)
		m.hooks.sweep(n)
		recordFailed(m.c, m.hooks, res, route)
		m.log.Warn("returned "+what, append(attrs, "events", n, "dead", len(res.Dead), "fenced", len(res.Fenced))...)
		if len(claims) < m.cfg.SweepBatch {
			return true
		}
		select {
		case <-run.Stopping():
			return false
		default:
		}
	}
}

// purge deletes SENT rows past retention, one bounded batch at a time.
func (m *maintainer) purge(run *runner.Runner) {
	for {
		n, err := m.store.PurgeSent(run.Context(), m.cfg.Retention, m.cfg.PurgeBatch)
		if err != nil {
			m.c.errors.Add(1)
			m.log.Error("purge failed", "error", err)
			return
		}
		m.c.purged.Add(n)
		if n < int64(m.cfg.PurgeBatch) {
			return
		}
		select {
		case <-run.Stopping():
			return
		default:
		}
	}
}

// sentWindow turns the relay's count of events marked SENT, sampled at
// each beat, into the count of about the last minute.
type sentWindow struct {
	samples []sentSample // oldest first; the first at least a minute old once there is one
}

type sentSample struct {
	at   time.Time
	sent int64
}

// add records sent at now and returns how many were sent since the
// sample nearest to a minute before now that is at least that old (or the
// first sample, while the relay is younger than a minute).
func (w *sentWindow) add(now time.Time, sent int64) int64 {
	w.samples = append(w.samples, sentSample{now, sent})
	for len(w.samples) > 1 && !w.samples[1].at.After(now.Add(-time.Minute)) {
		w.samples = w.samples[1:]
	}
	return sent - w.samples[0].sent
}

// beatFailures rate-limits the log of failing beats: the first failure,
// then one line a minute while they go on, then one when a beat works
// again.
type beatFailures struct {
	since, logged time.Time
	n             int64
}

func (f *beatFailures) note(log *slog.Logger, id string, err error) {
	if err == nil {
		if !f.since.IsZero() {
			log.Info("relay heartbeat recorded again", "failed_beats", f.n, "failing_for", time.Since(f.since).Round(time.Millisecond))
			*f = beatFailures{}
		}
		return
	}
	f.n++
	if f.since.IsZero() {
		f.since = time.Now()
	} else if time.Since(f.logged) < time.Minute {
		return
	}
	f.logged = time.Now()
	msg := "relay heartbeat failed; relaying goes on, but ferry status may not show this relay as alive"
	if errors.Is(err, ferrytype.ErrUndefinedTable) {
		msg = "relay heartbeat failed: the heartbeat table is missing (run ferry migrate); relaying goes on"
	}
	log.Warn(msg, "error", err, "failed_beats", f.n, "relay_id", id)
}

package ferry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/runner"
)

// maintainer keeps a relay's table in order beside its lanes: it records
// the relay in the heartbeat table, decides whether the relay leads the
// table's maintenance, and while it leads sweeps expired leases and prunes
// the rows of relays gone; every relay with a retention purges SENT rows.
// It reads the lanes' state and the outage tracker for the heartbeat, and
// calls nothing of the relay's.
type maintainer struct {
	store ferrystore.Store
	// registry is the store's heartbeat table, nil when the relay does
	// not beat.
	registry ferrystore.RelayRegistry
	cfg      *RelayConfig
	log      *slog.Logger
	hooks    *relayHooks
	c        *relayCounters
	state    *laneState
	outage   *outage
	source   string // the claim source's kind, for the heartbeat
	host     string

	// leading is true while this relay leads the table's maintenance:
	// always without a heartbeat table, else as the rows read after each
	// beat say.
	leading atomic.Bool
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

// stop deletes the relay's heartbeat row, once every goroutine of the
// relay ended: no beat comes after. ctx is the relay's work context.
func (m *maintainer) stop(ctx context.Context) {
	if m.registry != nil {
		m.forget(ctx)
	}
}

// heartbeat records the relay in the heartbeat table as it starts, then
// every Heartbeat.Interval until Stop; after each beat it reads the table
// to learn whether it leads maintenance, and while it leads it deletes the
// rows of relays that stopped beating ForgetAfter ago, at once and then
// every ForgetAfter (at most hourly).
func (m *maintainer) heartbeat(run *runner.Runner) {
	hb := m.cfg.Heartbeat
	pruneEvery := min(hb.ForgetAfter, time.Hour)
	var (
		lastPrune time.Time
		failing   beatFailures
		window    sentWindow
	)
	t := time.NewTicker(hb.Interval)
	defer t.Stop()
	for {
		sent := m.c.confirmed.Load()
		err := m.beat(run.Context(), sent, window.add(time.Now(), sent))
		failing.note(m.log, m.cfg.ID, err)
		m.elect(run.Context(), err)
		if err == nil && m.leading.Load() && time.Since(lastPrune) >= pruneEvery {
			lastPrune = time.Now()
			m.prune(run.Context())
		}
		select {
		case <-run.Stopping():
			return
		case <-t.C:
		}
	}
}

// elect decides, after a beat that returned beatErr, whether the relay
// leads maintenance: by the rule of ferrystore.MaintenanceLeader on the
// heartbeat rows, the relays alive being those that beat within three of
// this relay's heartbeat intervals. It leads when its beat or the read
// failed, or when no row is alive. A change is logged.
func (m *maintainer) elect(ctx context.Context, beatErr error) {
	hb := m.cfg.Heartbeat
	lead := true
	if beatErr == nil {
		ctx, cancel := context.WithTimeout(ctx, max(hb.Interval, time.Second))
		beats, err := m.registry.Relays(ctx)
		cancel()
		if err == nil {
			id := ferrystore.MaintenanceLeader(beats, time.Now(), 3*hb.Interval)
			lead = id == "" || id == m.cfg.ID
		}
	}
	if m.leading.Swap(lead) == lead {
		return
	}
	switch {
	case lead && m.cfg.SweepInterval < 0:
		m.log.Warn("this relay leads the table's maintenance but its sweeper is off (SweepInterval negative):"+
			" expired leases wait until a relay that sweeps leads", "relay_id", m.cfg.ID)
	case lead:
		m.log.Info("leading the table's maintenance: sweeping expired leases, pruning relays gone", "relay_id", m.cfg.ID)
	default:
		m.log.Info("another relay leads the table's maintenance", "relay_id", m.cfg.ID)
	}
}

// beat writes the relay's row: one statement, bounded by the heartbeat
// interval (at least a second).
func (m *maintainer) beat(ctx context.Context, sent, lastMinute int64) error {
	hb := m.cfg.Heartbeat
	ctx, cancel := context.WithTimeout(ctx, max(hb.Interval, time.Second))
	defer cancel()
	connected, cause := m.outage.state()
	err := m.registry.Beat(ctx, ferrystore.RelayBeat{
		ID: m.cfg.ID, Host: m.host, PID: os.Getpid(), Version: hb.Version, Broker: hb.Broker,
		Lanes: m.cfg.Lanes, Ordered: m.cfg.Ordered, InFlight: m.state.inFlight.Load(),
		BrokerConnected: connected, BrokerError: cause, Sent: sent, SentLastMinute: lastMinute, Source: m.source,
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
	n, err := m.registry.PruneRelays(ctx, hb.ForgetAfter)
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

// sweep returns expired leases, in bounded batches, through the retry
// policy: back to NEW after a delay, or DEAD past the attempt limit.
func (m *maintainer) sweep(run *runner.Runner) {
	ctx := run.Context()
	for {
		leases, err := m.store.ExpiredClaims(ctx, m.cfg.SweepBatch)
		if err != nil {
			m.c.errors.Add(1)
			m.log.Error("sweep failed", "error", err)
			return
		}
		if len(leases) == 0 {
			return
		}
		if err := ferryfault.At(ctx, ferryfault.RelayMidSweep); err != nil {
			m.log.Warn("fault mid-sweep: expired leases left", "error", err)
			return
		}
		fails := make([]ferrystore.Failure, len(leases))
		route := make(map[string]string, len(leases))
		for i, l := range leases {
			route[l.ID] = l.Destination
			res := ferrytype.Unknown(errors.New("lease expired before an outcome was recorded"))
			delay, dead := m.cfg.Retry.Next(l.Attempts, res)
			fails[i] = ferrystore.Failure{ID: l.ID, Token: l.Token, Dead: dead, Delay: delay,
				Error: fmt.Sprintf("attempt %d: unknown: lease expired before an outcome was recorded", l.Attempts)}
		}
		res, err := m.store.MarkFailed(ctx, fails)
		if err != nil {
			m.c.errors.Add(1)
			m.log.Error("sweep failed", "error", err)
			return
		}
		// Rows another sweeper or relay changed first are fenced: not
		// counted here.
		n := res.Changed()
		m.c.swept.Add(n)
		m.hooks.sweep(n)
		recordFailed(m.c, m.hooks, res, route)
		m.log.Warn("returned expired leases", "events", n, "dead", len(res.Dead), "fenced", len(res.Fenced))
		if len(leases) < m.cfg.SweepBatch {
			return
		}
		select {
		case <-run.Stopping():
			return
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

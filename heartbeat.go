package ferry

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// heartbeat records the relay in the heartbeat table as it starts, then
// every Heartbeat until Stop; after each beat it reads the table to learn
// whether it leads maintenance, and while it leads it deletes the rows of
// relays that stopped beating ForgetAfter ago, at once and then every
// ForgetAfter (at most hourly).
func (r *Relay) heartbeat() {
	pruneEvery := min(r.cfg.ForgetAfter, time.Hour)
	var (
		lastPrune time.Time
		failing   beatFailures
		window    sentWindow
	)
	t := time.NewTicker(r.cfg.Heartbeat)
	defer t.Stop()
	for {
		sent := r.c.confirmed.Load()
		err := r.beat(sent, window.add(time.Now(), sent))
		failing.note(r, err)
		r.elect(err)
		if err == nil && r.leading.Load() && time.Since(lastPrune) >= pruneEvery {
			lastPrune = time.Now()
			r.prune()
		}
		select {
		case <-r.stopping:
			return
		case <-t.C:
		}
	}
}

// elect decides, after a beat that returned beatErr, whether the relay
// leads maintenance: by the rule of ferrystore.MaintenanceLeader on the
// heartbeat rows, the relays alive being those that beat within three of
// this relay's Heartbeats. It leads when its beat or the read failed, or
// when no row is alive. A change is logged.
func (r *Relay) elect(beatErr error) {
	lead := true
	if beatErr == nil {
		ctx, cancel := context.WithTimeout(r.workCtx, max(r.cfg.Heartbeat, time.Second))
		beats, err := r.registry.Relays(ctx)
		cancel()
		if err == nil {
			id := ferrystore.MaintenanceLeader(beats, time.Now(), 3*r.cfg.Heartbeat)
			lead = id == "" || id == r.cfg.ID
		}
	}
	if r.leading.Swap(lead) == lead {
		return
	}
	switch {
	case lead && r.cfg.SweepInterval < 0:
		r.log.Warn("this relay leads the table's maintenance but its sweeper is off (SweepInterval negative):"+
			" expired leases wait until a relay that sweeps leads", "relay_id", r.cfg.ID)
	case lead:
		r.log.Info("leading the table's maintenance: sweeping expired leases, pruning relays gone", "relay_id", r.cfg.ID)
	default:
		r.log.Info("another relay leads the table's maintenance", "relay_id", r.cfg.ID)
	}
}

// beat writes the relay's row: one statement, bounded by the heartbeat
// interval (at least a second).
func (r *Relay) beat(sent, lastMinute int64) error {
	ctx, cancel := context.WithTimeout(r.workCtx, max(r.cfg.Heartbeat, time.Second))
	defer cancel()
	connected, cause := r.brokerState()
	source := ferrystore.RelaySourceTable
	if r.follow != nil {
		source = ferrystore.RelaySourceLog
	}
	err := r.registry.Beat(ctx, ferrystore.RelayBeat{
		ID: r.cfg.ID, Host: r.host, PID: os.Getpid(), Version: r.cfg.Version, Broker: r.cfg.Broker,
		Lanes: r.cfg.Lanes, Ordered: r.cfg.Ordered, InFlight: r.inFlight.Load(),
		BrokerConnected: connected, BrokerError: cause, Sent: sent, SentLastMinute: lastMinute, Source: source,
	})
	if err != nil {
		r.c.beatErrors.Add(1)
	} else {
		r.c.beats.Add(1)
	}
	r.hooks.heartbeat(err)
	return err
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

func (f *beatFailures) note(r *Relay, err error) {
	if err == nil {
		if !f.since.IsZero() {
			r.log.Info("relay heartbeat recorded again", "failed_beats", f.n, "failing_for", time.Since(f.since).Round(time.Millisecond))
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
	r.log.Warn(msg, "error", err, "failed_beats", f.n, "relay_id", r.cfg.ID)
}

// prune deletes the rows of relays that stopped beating ForgetAfter ago.
func (r *Relay) prune() {
	ctx, cancel := context.WithTimeout(r.workCtx, max(r.cfg.Heartbeat, time.Second))
	defer cancel()
	n, err := r.registry.PruneRelays(ctx, r.cfg.ForgetAfter)
	switch {
	case err != nil:
		r.log.Warn("pruning the heartbeats of relays gone failed", "error", err)
	case n > 0:
		r.log.Info("forgot relays that stopped beating", "relays", n, "silent_for", r.cfg.ForgetAfter)
	}
}

// forget deletes the relay's row as it stops, within a few seconds even
// when ctx already ended (Stop gave up waiting).
func (r *Relay) forget(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.fault(ctx, FaultBeforeForget); err != nil {
		r.log.Warn("fault before forget: heartbeat row left", "relay_id", r.cfg.ID, "error", err)
		return
	}
	if err := r.registry.ForgetRelay(ctx, r.cfg.ID); err != nil {
		r.log.Warn("deleting the relay's heartbeat row failed; it ages until pruned", "relay_id", r.cfg.ID, "error", err)
	}
}

// brokerState says whether a publish made now could reach the broker, and
// why not (redacted): the publisher's connectivity when it reports one,
// and an outage the relay saw in its results.
func (r *Relay) brokerState() (bool, string) {
	if r.conn != nil {
		if err := r.conn.Disconnected(); err != nil {
			return false, ferrytype.RedactURL(err.Error())
		}
	}
	o := &r.outage
	o.mu.Lock()
	down, byConn, cause := !o.since.IsZero(), o.byConn, o.cause
	o.mu.Unlock()
	if !down || byConn {
		// byConn: the publisher reported the outage, and now reports its
		// connection back.
		return true, ""
	}
	msg := "publishes came back not sent"
	if cause != nil {
		msg = ferrytype.RedactURL(cause.Error())
	}
	return false, msg
}

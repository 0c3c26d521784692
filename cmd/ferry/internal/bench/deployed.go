package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
)

// drainRun is one drain: its rate, each party's CPU per event, and the
// statements the database server counted per event; for relay processes,
// the CPU time each spent starting (StartCPU, not in CPU.Relay).
type drainRun struct {
	Rate       float64
	CPU        CPU
	Statements Statements
	StartCPU   time.Duration
}

// cpuClock is the CPU time of the servers, and the database's count of
// statements, at the start of a drain.
type cpuClock struct {
	m          *meter
	t          *Target
	at         time.Time
	db, broker procCPU
	self       time.Duration
	stmts      statementCount
}

func (m *meter) start(ctx context.Context, t *Target) *cpuClock {
	c := &cpuClock{m: m, t: t, at: time.Now(), self: selfCPU()}
	c.db, c.broker = m.sample()
	c.stmts = t.statementCount(ctx)
	return c
}

// stop ends the drain of n events, whose relays used relay CPU time.
func (c *cpuClock) stop(ctx context.Context, n int, relay time.Duration, relayMeasured bool) drainRun {
	took := time.Since(c.at)
	db, broker := c.m.sample()
	return drainRun{Rate: float64(n) / took.Seconds(), CPU: CPU{
		DB:     perEvent(c.m.db != "" || c.m.dbRoot != "", db.since(c.db), n),
		Broker: perEvent(c.m.broker != "", broker.since(c.broker), n),
		Relay:  perEvent(relayMeasured, relay, n),
	}, Statements: c.t.statementCount(ctx).since(c.stmts, c.t.ownStatements(), n)}
}

// relayProcess starts ferry relay as its own process: binary with extra
// environment env, on t's table and b's destination, with args added to
// the defaults.
func relayProcess(ctx context.Context, binary string, env []string, t *Target, b *Broker, args ...string) (*exec.Cmd, *bytes.Buffer, error) {
	return relayProcessTo(ctx, binary, env, t, b, nil, args...)
}

// relayProcessTo is relayProcess whose output also goes to w, when not
// nil.
func relayProcessTo(ctx context.Context, binary string, env []string, t *Target, b *Broker, w io.Writer, args ...string) (*exec.Cmd, *bytes.Buffer, error) {
	all := append([]string{"relay", "--database-url", t.url, "--table", t.Store.Table()}, b.relayArgs()...)
	cmd := exec.CommandContext(ctx, binary, append(all, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out := new(bytes.Buffer)
	var to io.Writer = out
	if w != nil {
		to = io.MultiWriter(out, w)
	}
	cmd.Stdout, cmd.Stderr = to, to
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s relay: %w", binary, err)
	}
	return cmd, out, nil
}

// processArgs are the flags a relay process gets beyond the defaults:
// only what the bench was told to change.
func processArgs(spec RelaySpec) []string {
	var args []string
	if spec.Ordered {
		args = append(args, "--ordered")
	}
	if spec.Lanes > 0 {
		args = append(args, "--lanes", fmt.Sprint(spec.Lanes))
	}
	if spec.Batch > 0 && spec.Batch != 100 {
		args = append(args, "--batch-size", fmt.Sprint(spec.Batch))
	}
	return args
}

// drainProcesses drains n pre-filled events with spec.Relays ferry relay
// --drain processes. The rate is measured from the first process's start
// line ("relay started": its connections are up and its lanes claim) to
// the last one's exit, and each process's CPU from its start line to its
// exit: what the processes spend relaying, without the start of a Go
// binary and its connections (about 70 ms of CPU a process here, which a
// daemon spends once, not per event: startCPU reports it).
func drainProcesses(ctx context.Context, t *Target, b *Broker, n int, spec RelaySpec, binary string, env []string, m *meter) (drainRun, error) {
	if err := prepare(ctx, t, b, n); err != nil {
		return drainRun{}, err
	}
	type proc struct {
		cmd     *exec.Cmd
		out     *bytes.Buffer
		started *startLine
	}
	procs := make([]proc, 0, spec.Relays)
	first := make(chan struct{})
	var once sync.Once
	for range spec.Relays {
		sl := &startLine{first: func() { once.Do(func() { close(first) }) }}
		cmd, out, err := relayProcessTo(ctx, binary, env, t, b, sl, append([]string{"--drain"}, processArgs(spec)...)...)
		if err != nil {
			for _, p := range procs {
				_ = p.cmd.Process.Kill()
				_ = p.cmd.Wait()
			}
			return drainRun{}, err
		}
		sl.setPID(cmd.Process.Pid)
		procs = append(procs, proc{cmd, out, sl})
	}
	select {
	case <-first:
	case <-ctx.Done():
		return drainRun{}, ctx.Err()
	}
	c := m.start(ctx, t)
	var (
		relayCPU, startCPU time.Duration
		failed             []string
	)
	for _, p := range procs {
		err := p.cmd.Wait()
		if st := p.cmd.ProcessState; st != nil {
			at, ok := p.started.at()
			if !ok {
				err = errors.Join(err, errors.New("no \"relay started\" line"))
			}
			relayCPU += st.UserTime() + st.SystemTime() - at
			startCPU += at
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%v: %s", err, strings.TrimSpace(p.out.String())))
		}
	}
	run := c.stop(ctx, n, relayCPU, true)
	run.StartCPU = startCPU / time.Duration(len(procs))
	if len(failed) > 0 {
		return drainRun{}, fmt.Errorf("ferry relay --drain: %s", strings.Join(failed, "; "))
	}
	if err := t.expectSent(ctx, n); err != nil {
		return drainRun{}, err
	}
	return run, b.expect(ctx, n)
}

// startLine watches a relay process's output for its start line, and
// reads the process's CPU time when it comes.
type startLine struct {
	pid   int
	first func() // called at the start line
	mu    sync.Mutex
	buf   bytes.Buffer
	cpu   time.Duration
	seen  bool
}

func (s *startLine) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.seen {
		s.buf.Write(p)
		if bytes.Contains(s.buf.Bytes(), []byte("relay started")) {
			s.seen = true
			s.buf.Reset()
			s.read()
			s.first()
		}
	}
	return len(p), nil
}

// setPID names the process, once it started (its output may come
// first).
func (s *startLine) setPID(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pid = pid
	if s.seen {
		s.read()
	}
}

// read reads the process's CPU time, once its pid is known; s.mu held.
func (s *startLine) read() {
	if s.pid != 0 {
		s.cpu, _, _ = statCPU(strconv.Itoa(s.pid))
	}
}

// at returns the process's CPU time at its start line.
func (s *startLine) at() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cpu, s.seen
}

// drainPlain drains n pre-filled events with loops plain relay loops.
func drainPlain(ctx context.Context, t *Target, b *Broker, n, loops, batch int, m *meter) (drainRun, error) {
	if err := prepare(ctx, t, b, n); err != nil {
		return drainRun{}, err
	}
	p := &plainRelay{t: t, b: b, batch: batch}
	var sent atomic.Int64
	c := m.start(ctx, t)
	if _, err := parallel(loops, loops, func(int) error { return p.loop(ctx, 0, &sent) }); err != nil {
		return drainRun{}, err
	}
	run := c.stop(ctx, n, selfCPU()-c.self, true)
	if sent.Load() != int64(n) {
		return drainRun{}, fmt.Errorf("plain relay: %d of %d events marked SENT", sent.Load(), n)
	}
	return run, b.expect(ctx, n)
}

// expectSent checks that the outbox holds exactly n SENT events.
func (t *Target) expectSent(ctx context.Context, n int) error {
	var got int
	if err := t.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+t.quote(t.Store.Table())+" WHERE status = 'SENT'").Scan(&got); err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("%d of %d events SENT after the drain", got, n)
	}
	return nil
}

// Live modes: the relay the live scenario measures.
const (
	LiveInProcess = "in-process"
	LiveProcess   = "process"
	LivePlain     = "plain"
)

// liveRelay starts the relay of one live mode and returns how to stop it.
type liveRelay func(ctx context.Context, lat *latencies) (stop func() error, err error)

// live runs producers committing one event per transaction at rate for d
// while the relay start starts runs, and measures commit (COMMIT
// returned) → delivery at a consumer of the destination. wake, when not
// nil, is what the producers' outbox wakes.
func live(ctx context.Context, t *Target, b *Broker, rate int, d time.Duration, mode string, wake *ferry.Wakeup, start liveRelay) (LiveResult, error) {
	res := LiveResult{Mode: mode}
	if err := t.truncate(ctx); err != nil {
		return res, err
	}
	if err := b.Purge(ctx); err != nil {
		return res, err
	}
	var ocfg *ferry.OutboxConfig
	if wake != nil {
		ocfg = &ferry.OutboxConfig{Wakeup: wake}
	}
	ob, err := ferry.NewOutbox(t.Driver, ocfg)
	if err != nil {
		return res, err
	}
	lat := &latencies{pending: map[string]time.Time{}, commits: map[string]bool{}}
	stopConsumer, err := b.Consume(ctx, lat.confirm)
	if err != nil {
		return res, fmt.Errorf("consume: %w", err)
	}
	defer stopConsumer()
	stopRelay, err := start(ctx, lat)
	if err != nil {
		return res, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = stopRelay()
		}
	}()
	commit := func(i int) error {
		tx, err := t.DB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		ids, err := ob.EnqueueTx(ctx, tx, ferry.Event{AggregateType: "order", AggregateID: fmt.Sprint(i),
			Type: "OrderPaid", Destination: b.Dest, Payload: Payload})
		if err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		lat.commit(ids[0], time.Now())
		ob.Notify()
		return nil
	}
	// One event first, outside the figures: the relay is up once it is
	// delivered.
	if err := commit(-1); err != nil {
		return res, err
	}
	if err := lat.await(ctx, 1, time.Minute); err != nil {
		return res, fmt.Errorf("live %s: the relay did not start: %w", mode, err)
	}
	lat.reset()
	n := int(float64(rate) * d.Seconds())
	interval := time.Second / time.Duration(rate)
	begin := time.Now()
	// Enough producers that one slow COMMIT does not hold back the
	// schedule; each event waits for its own slot.
	_, err = parallel(n, 16, func(i int) error {
		if wait := time.Until(begin.Add(time.Duration(i-1) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		return commit(i)
	})
	if err != nil {
		return res, err
	}
	res.Rate = float64(n) / time.Since(begin).Seconds()
	if err := lat.await(ctx, n, time.Minute); err != nil {
		return res, fmt.Errorf("live %s: %w", mode, err)
	}
	stopped = true
	if err := stopRelay(); err != nil {
		return res, fmt.Errorf("live %s: stop the relay: %w", mode, err)
	}
	res.Events = n
	lat.mu.Lock()
	defer lat.mu.Unlock()
	res.P50, res.P99, res.Max = percentiles(lat.got)
	res.ClaimTook = lat.claimSum / time.Duration(max(lat.claims, 1))
	res.PublishTook = lat.publishSum / time.Duration(max(lat.publishes, 1))
	return res, nil
}

// await waits until n events were committed and delivered.
func (l *latencies) await(ctx context.Context, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		l.mu.Lock()
		done := len(l.got)
		l.mu.Unlock()
		if done >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d events delivered within %s", done, n, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (l *latencies) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = nil
	l.claims, l.publishes, l.claimSum, l.publishSum = 0, 0, 0, 0
}

// Live measures latency under a steady load: producers commit one event
// per transaction at rate events per second for d, while relays (with
// lanes each) in the same process, woken by the producers' commits, relay
// them; latency runs from COMMIT returning to the event's delivery at a
// consumer. lanes 0 takes the relay's default.
func Live(ctx context.Context, t *Target, b *Broker, rate int, d time.Duration, relays, lanes int) (LiveResult, error) {
	wake := ferry.NewWakeup()
	var (
		rs   []*ferry.Relay
		pubs []ferrybroker.Publisher
	)
	res, err := live(ctx, t, b, rate, d, LiveInProcess, wake, func(ctx context.Context, lat *latencies) (func() error, error) {
		stop := func() error {
			var first error
			for _, r := range rs {
				if err := r.Stop(context.Background()); err != nil && first == nil {
					first = err
				}
			}
			for _, p := range pubs {
				p.Close()
			}
			return first
		}
		for range relays {
			p, err := b.Publisher(ctx)
			if err != nil {
				_ = stop()
				return nil, err
			}
			pubs = append(pubs, p)
			r, err := ferry.NewRelay(t.Store, p, &ferry.RelayConfig{Lanes: lanes, Wakeup: wake, Hooks: []ferry.Hook{lat}})
			if err == nil {
				err = r.Start(ctx)
			}
			if err != nil {
				_ = stop()
				return nil, err
			}
			rs = append(rs, r)
		}
		return stop, nil
	})
	for _, r := range rs {
		st := r.Stats()
		res.Claims += st.Claims
		res.RelayErrors += st.Errors
	}
	return res, err
}

// liveProcess is the live scenario with ferry relay in its own process,
// with its default settings.
func liveProcess(ctx context.Context, t *Target, b *Broker, rate int, d time.Duration, binary string, env []string, spec RelaySpec) (LiveResult, error) {
	return live(ctx, t, b, rate, d, LiveProcess, nil, func(ctx context.Context, _ *latencies) (func() error, error) {
		cmd, out, err := relayProcess(ctx, binary, env, t, b, processArgs(spec)...)
		if err != nil {
			return nil, err
		}
		var once sync.Once
		var werr error
		return func() error {
			once.Do(func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				if werr = cmd.Wait(); werr != nil {
					werr = fmt.Errorf("%w: %s", werr, strings.TrimSpace(out.String()))
				}
			})
			return werr
		}, nil
	})
}

// livePlain is the live scenario with the plain relay polling every poll.
func livePlain(ctx context.Context, t *Target, b *Broker, rate int, d, poll time.Duration, batch int) (LiveResult, error) {
	return live(ctx, t, b, rate, d, LivePlain, nil, func(ctx context.Context, _ *latencies) (func() error, error) {
		p := &plainRelay{t: t, b: b, batch: batch}
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		var sent atomic.Int64
		go func() { done <- p.loop(lctx, poll, &sent) }()
		return func() error { cancel(); return <-done }, nil
	})
}

package ferryamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry/ferrytype"
)

// ErrNotConnected is wrapped by the errors of operations attempted while
// the connection to RabbitMQ is down.
var ErrNotConnected = errors.New("ferryamqp: not connected to RabbitMQ")

// session is the state a component keeps on one connection (its
// channels). A session ends when its connection closes or when it can no
// longer work on it (a consumer's channel closed).
type session interface {
	done() <-chan struct{}
	// close releases the session's channels, never the connection.
	close()
}

// link keeps one session up: on a borrowed connection for as long as that
// connection lives, on a connection it dials itself (dial != nil) for as
// long as the link runs, redialling with backoff after a loss. Given
// several nodes, each redial tries them in turn from the one after the
// node last reached (nodes.dialer), and a reconnection to another node
// than before is logged as such, once.
type link[S session] struct {
	log  *slog.Logger
	open func(ctx context.Context, conn *amqp.Connection, batch *batchConn) (S, error)
	dial dialFunc // nil: conn is borrowed
	ccfg ConnectionConfig

	mu      sync.Mutex
	conn    *amqp.Connection
	node    string // the node conn is connected to, of several (dialFunc); "" for one
	cur     S
	up      bool
	ended   bool          // the link will never be up again
	lastErr error         // why the link is down
	changed chan struct{} // closed and replaced whenever up changes

	stop chan struct{}
	wg   sync.WaitGroup
}

func newLink[S session](log *slog.Logger, ccfg ConnectionConfig,
	open func(context.Context, *amqp.Connection, *batchConn) (S, error)) *link[S] {
	return &link[S]{log: log, ccfg: ccfg, open: open, changed: make(chan struct{}), stop: make(chan struct{})}
}

// checkBorrowed refuses connections ferryamqp cannot manage safely.
func checkBorrowed(conn *amqp.Connection) error {
	switch {
	case conn == nil:
		return fmt.Errorf("%w: connection is nil", ferrytype.ErrInvalidConfig)
	case conn.IsClosed():
		return fmt.Errorf("%w: connection is closed", ErrNotConnected)
	case conn.IsRecoveryEnabled():
		// A recovered channel restarts its delivery tags and nacks the
		// publishes it had pending: ferryamqp could then report a lost
		// confirm as a broker nack, or ack a new delivery with an old
		// tag. It reconnects by itself instead (Dial, DialConsumer).
		return fmt.Errorf("%w: the connection has amqp091-go automatic recovery enabled; "+
			"ferryamqp needs it off (it reopens channels itself: use Dial or DialConsumer to let it reconnect)",
			ferrytype.ErrInvalidConfig)
	}
	return nil
}

// start opens the first session, on conn (borrowed) or on a connection
// dialled with dial, and keeps it up until shutdown.
func (l *link[S]) start(ctx context.Context, conn *amqp.Connection, dial dialFunc) error {
	l.dial = dial
	var batch *batchConn
	var node string
	if conn == nil {
		var err error
		if conn, batch, node, err = dial(); err != nil {
			return err
		}
	}
	s, err := l.open(ctx, conn, batch)
	if err != nil {
		if dial != nil {
			closeConn(conn, l.ccfg.DialTimeout)
		}
		return err
	}
	l.mu.Lock()
	l.conn, l.node = conn, node
	l.set(s, true, nil)
	l.mu.Unlock()
	l.wg.Add(1)
	go l.supervise(conn, batch, s)
	return nil
}

// set records the link state; l.mu is held.
func (l *link[S]) set(s S, up bool, err error) {
	l.cur, l.up, l.lastErr = s, up, err
	close(l.changed)
	l.changed = make(chan struct{})
}

// current returns the live session, waiting up to wait (and at most until
// ctx ends) for one while the link is down.
func (l *link[S]) current(ctx context.Context, wait time.Duration) (S, error) {
	var t <-chan time.Time
	for {
		l.mu.Lock()
		s, up, ended, lastErr, changed := l.cur, l.up, l.ended, l.lastErr, l.changed
		l.mu.Unlock()
		if up {
			return s, nil
		}
		var zero S
		if ended || wait < 0 {
			return zero, l.downErr(lastErr)
		}
		if t == nil {
			timer := time.NewTimer(wait)
			defer timer.Stop()
			t = timer.C
		}
		select {
		case <-changed:
		case <-t:
			return zero, l.downErr(lastErr)
		case <-ctx.Done():
			return zero, fmt.Errorf("%w: %w", l.downErr(lastErr), ctx.Err())
		}
	}
}

// next returns the live session when it is not prev, waiting while the
// link is down or still on prev (a session that ended and is not replaced
// yet); false once stop is closed or the link ended.
func (l *link[S]) next(stop <-chan struct{}, prev S) (S, bool) {
	var zero S
	for {
		l.mu.Lock()
		s, up, ended, changed := l.cur, l.up, l.ended, l.changed
		l.mu.Unlock()
		select {
		case <-stop:
			return zero, false
		default:
		}
		switch {
		case up && any(s) != any(prev):
			return s, true
		case ended:
			return zero, false
		}
		select {
		case <-changed:
		case <-stop:
			return zero, false
		}
	}
}

func (l *link[S]) downErr(lastErr error) error {
	if lastErr == nil {
		return ErrNotConnected
	}
	return fmt.Errorf("%w: %w", ErrNotConnected, lastErr)
}

// supervise waits for the session to end and replaces it, until shutdown.
func (l *link[S]) supervise(conn *amqp.Connection, batch *batchConn, s S) {
	defer l.wg.Done()
	backoff := l.ccfg.ReconnectMin
	l.mu.Lock()
	node := l.node
	l.mu.Unlock()
	for {
		connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
		since := time.Now()
		var reason error
		select {
		case <-l.stop:
			s.close()
			if l.dial != nil {
				closeConn(conn, l.ccfg.DialTimeout)
			}
			return
		case <-s.done():
			reason = errors.New("session ended")
		case e := <-connClosed:
			reason = errors.New("connection closed")
			if e != nil {
				reason = e
			}
		}
		l.mu.Lock()
		var zero S
		l.set(zero, false, reason)
		l.mu.Unlock()
		s.close()
		if time.Since(since) > l.ccfg.ReconnectMax {
			backoff = l.ccfg.ReconnectMin
		}
		if conn.IsClosed() {
			if l.dial == nil {
				l.log.Error("connection to RabbitMQ closed; it was provided by the caller, so it is not reopened",
					"error", reason)
				l.mu.Lock()
				l.ended = true
				l.set(zero, false, fmt.Errorf("the caller's connection closed: %w", reason))
				l.mu.Unlock()
				return
			}
			l.log.Warn("connection to RabbitMQ lost; reconnecting", "error", reason, "retry_in", backoff)
		} else {
			l.log.Warn("channels to RabbitMQ closed; reopening", "error", reason, "retry_in", backoff)
		}
		for {
			select {
			case <-l.stop:
				if l.dial != nil && !conn.IsClosed() {
					closeConn(conn, l.ccfg.DialTimeout)
				}
				return
			case <-time.After(jitter(backoff)):
			}
			backoff = min(backoff*2, l.ccfg.ReconnectMax)
			if conn.IsClosed() {
				if l.dial == nil {
					l.mu.Lock()
					l.ended = true
					l.set(zero, false, errors.New("the caller's connection closed"))
					l.mu.Unlock()
					return
				}
				c, b, n, err := l.dial()
				if err != nil {
					l.recordDown(err)
					l.log.Warn("reconnect to RabbitMQ failed", "error", err, "retry_in", backoff)
					continue
				}
				conn, batch, node = c, b, n
			}
			ctx, cancel := context.WithTimeout(context.Background(), l.ccfg.DialTimeout+30*time.Second)
			ns, err := l.open(ctx, conn, batch)
			cancel()
			if err != nil {
				l.recordDown(err)
				l.log.Error("reopen on RabbitMQ failed", "error", err, "retry_in", backoff)
				continue
			}
			s = ns
			l.mu.Lock()
			prev := l.node
			l.conn, l.node = conn, node
			l.set(s, true, nil)
			l.mu.Unlock()
			if node != prev {
				l.log.Warn("connected to another RabbitMQ node", "from", prev, "to", node)
			} else {
				l.log.Info("connected to RabbitMQ again")
			}
			break
		}
	}
}

func (l *link[S]) recordDown(err error) {
	l.mu.Lock()
	l.lastErr = err
	l.mu.Unlock()
}

// shutdown stops the link: it closes the session and, if it dialled the
// connection itself, the connection. Safe to call twice.
func (l *link[S]) shutdown() {
	l.mu.Lock()
	select {
	case <-l.stop:
		l.mu.Unlock()
		l.wg.Wait()
		return
	default:
	}
	close(l.stop)
	l.mu.Unlock()
	l.wg.Wait()
	l.mu.Lock()
	var zero S
	l.ended = true
	l.set(zero, false, ferrytype.ErrClosed)
	l.mu.Unlock()
}

// connection returns the current connection, nil when down.
func (l *link[S]) connection() *amqp.Connection {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.up {
		return nil
	}
	return l.conn
}

// rpc runs fn, a blocking AMQP call that takes no context, and returns
// its error, or ctx's error when ctx ends first. fn then finishes in the
// background; it returns at the latest when its connection closes. A call
// can block for long on a connection RabbitMQ blocked (a resource alarm
// stops it reading the socket).
func rpc(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closeTimeout bounds the wait for RabbitMQ to answer a channel close.
const closeTimeout = 5 * time.Second

// closeChannel closes ch without waiting more than closeTimeout for
// RabbitMQ's answer (a blocked connection gives none).
func closeChannel(ch *amqp.Channel) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = rpc(ctx, ch.Close)
}

// closeConn closes a connection ferryamqp dialled, waiting at most d for
// RabbitMQ's answer.
func closeConn(conn *amqp.Connection, d time.Duration) {
	_ = conn.CloseDeadline(time.Now().Add(d))
}

// jitter spreads d by ±20%.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

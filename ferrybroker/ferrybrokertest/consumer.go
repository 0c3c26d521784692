package ferrybrokertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// RawMessage is a message the suite publishes to the queue or stream under
// test as it is: no ferry header is added.
type RawMessage struct {
	// ID is the broker message id (AMQP message_id, Nats-Msg-Id); empty
	// for none.
	ID      string
	Payload []byte
	Headers map[string]string
}

// ConsumerOptions is what the suite sets on a consumer; the harness maps
// it to the consumer's config and leaves every other field at a value
// that suits a test (short timeouts, say).
type ConsumerOptions struct {
	Concurrency int
	Redelivery  ferrybroker.RedeliveryPolicy
	Hooks       []ferrybroker.Hook
	Validate    func(d *ferrybroker.Delivery) error
}

// ConsumerSetup is a fresh queue or stream, with where its consumers park.
type ConsumerSetup struct {
	// Route is the routing key or subject Publish publishes to, as
	// handlers see it in Delivery.Route and parked copies carry it in
	// ferrybroker.HeaderParkRoute.
	Route string
	// Publish publishes m to the queue or stream under test and returns
	// once the broker stored it.
	Publish func(t *testing.T, m RawMessage)
	// NewConsumer returns a consumer, not started, of the queue or
	// stream under test running h. Every consumer of one setup shares
	// the broker's consuming state (queue, durable): one started after
	// another stopped takes over what was left.
	NewConsumer func(t *testing.T, h ferrybroker.Handler, o ConsumerOptions) ferrybroker.Consumer
	// Parked returns the messages parked so far, waiting up to d for at
	// least want of them. Calls may return the same messages again.
	Parked func(t *testing.T, want int, d time.Duration) []Received
	// Unsettled returns the number of messages on the queue or stream
	// not acked (waiting or in flight). It is called with no consumer
	// running.
	Unsettled func(t *testing.T) int
	// BreakParking, when set, makes parking fail from now on (it deletes
	// the parking queue or stream), with a consumer running.
	BreakParking func(t *testing.T)
	// Outage, when set, makes the broker unreachable for the setup's
	// consumers from now on — open connections closed, new ones closed
	// as soon as they are accepted — until the returned Outage's Restore.
	Outage func(t *testing.T) Outage
}

// Outage is a broker cut off the network by ConsumerSetup.Outage.
type Outage struct {
	// Refused counts the connections closed on accept so far: how often
	// clients tried to reach the broker.
	Refused func() int64
	// Restore makes the broker reachable again.
	Restore func()
}

// ConsumerHarness adapts one broker's consumer to the suite.
type ConsumerHarness struct {
	// New returns a fresh setup, torn down when t ends.
	New func(t *testing.T) ConsumerSetup
}

// recorder is a hook that records what the consumer reported, and checks
// that every delivery is settled once and that acks follow a nil handler
// return.
type recorder struct {
	mu         sync.Mutex
	delivered  int
	starts     int
	handled    int
	settled    map[ferrybroker.Action]int
	committed  map[*ferrybroker.Delivery]bool // the handler returned nil
	open       map[*ferrybroker.Delivery]bool // delivered, not settled
	violations []string
	// onSettled, when set, runs on each settlement.
	onSettled func(d *ferrybroker.Delivery, s ferrybroker.Settlement)
}

func newRecorder() *recorder {
	return &recorder{settled: map[ferrybroker.Action]int{}, committed: map[*ferrybroker.Delivery]bool{},
		open: map[*ferrybroker.Delivery]bool{}}
}

func (r *recorder) OnDelivered(_ string, d *ferrybroker.Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.delivered++
	if r.open[d] {
		r.violations = append(r.violations, fmt.Sprintf("%s delivered twice without a settlement", d.MessageID))
	}
	r.open[d] = true
}

func (r *recorder) OnHandleStart(ctx context.Context, _ string, d *ferrybroker.Delivery) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts++
	if !r.open[d] {
		r.violations = append(r.violations, fmt.Sprintf("%s handled without OnDelivered", d.MessageID))
	}
	return ctx
}

func (r *recorder) OnHandled(_ context.Context, _ string, d *ferrybroker.Delivery, err error, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handled++
	if err == nil {
		r.committed[d] = true
	}
}

func (r *recorder) OnSettled(_ string, d *ferrybroker.Delivery, s ferrybroker.Settlement) {
	r.mu.Lock()
	r.settled[s.Action]++
	if !r.open[d] {
		r.violations = append(r.violations, fmt.Sprintf("%s settled (%s) but not delivered, or settled twice", d.MessageID, s.Action))
	}
	delete(r.open, d)
	if s.Action == ferrybroker.ActionAcked && !r.committed[d] {
		r.violations = append(r.violations, fmt.Sprintf("%s acked before its handler returned nil", d.MessageID))
	}
	if s.Action != ferrybroker.ActionAcked && s.Action != ferrybroker.ActionLeft && r.committed[d] {
		r.violations = append(r.violations, fmt.Sprintf("%s %s after its handler returned nil", d.MessageID, s.Action))
	}
	fn := r.onSettled
	r.mu.Unlock()
	if fn != nil {
		fn(d, s)
	}
}

// agrees checks, with the consumer idle, that the hooks saw what the
// stats count and that nothing broke the settlement rules.
func (r *recorder) agrees(t *testing.T, c ferrybroker.Consumer) ferrybroker.ConsumerStats {
	t.Helper()
	st := c.Stats()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(t, r.violations)
	require.Equal(t, int64(r.delivered), st.Delivered, "OnDelivered calls and Stats.Delivered: %+v", st)
	require.Equal(t, int64(r.handled), st.Handled, "OnHandled calls and Stats.Handled: %+v", st)
	require.Equal(t, r.starts, r.handled, "every OnHandleStart has its OnHandled")
	require.Equal(t, int64(r.settled[ferrybroker.ActionAcked]), st.Acked, "%+v", st)
	require.Equal(t, int64(r.settled[ferrybroker.ActionRetried]), st.Retried, "%+v", st)
	require.Equal(t, int64(r.settled[ferrybroker.ActionParked]), st.Parked, "%+v", st)
	require.Equal(t, int64(r.settled[ferrybroker.ActionLeft]), st.Left, "%+v", st)
	require.Empty(t, r.open, "deliveries never settled")
	require.Zero(t, st.InFlight, "%+v", st)
	require.Equal(t, st.Delivered, st.Acked+st.Retried+st.Parked+st.Left, "every delivery settled once: %+v", st)
	return st
}

// consumerBundle is one subtest's setup and helpers.
type consumerBundle struct {
	ConsumerSetup
	ctx context.Context
	seq int
}

func (b *consumerBundle) publish(t *testing.T, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		b.seq++
		ids[i] = fmt.Sprintf("evt-%d-%d", time.Now().UnixNano(), b.seq)
		b.Publish(t, RawMessage{ID: ids[i], Payload: []byte(fmt.Sprintf(`{"n":%d}`, b.seq)), Headers: map[string]string{
			ferrybroker.HeaderEventID: ids[i], ferrybroker.HeaderEventType: "OrderPaid",
			"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		}})
	}
	return ids
}

// unsettled waits until the broker holds want messages not acked (acks
// and terminations may be asynchronous).
func (b *consumerBundle) unsettled(t *testing.T, want int) {
	t.Helper()
	var n int
	waitFor(t, 30*time.Second, func() bool { n = b.Unsettled(t); return n == want },
		func() string { return fmt.Sprintf("%d messages not acked, want %d", n, want) })
}

// start builds and starts a consumer with a recorder hook and stops it
// when t ends.
func (b *consumerBundle) start(t *testing.T, h ferrybroker.Handler, o ConsumerOptions) (ferrybroker.Consumer, *recorder) {
	t.Helper()
	return b.startWith(t, b.ctx, h, o)
}

// startWith is start with the start context ctx, whose values (a fault
// Func) the consumer keeps.
func (b *consumerBundle) startWith(t *testing.T, ctx context.Context, h ferrybroker.Handler, o ConsumerOptions) (ferrybroker.Consumer, *recorder) {
	t.Helper()
	r := newRecorder()
	o.Hooks = append(o.Hooks, r)
	if o.Concurrency == 0 {
		o.Concurrency = 4
	}
	c := b.NewConsumer(t, h, o)
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c, r
}

// idle waits until c settled everything it took.
func idle(t *testing.T, c ferrybroker.Consumer) {
	t.Helper()
	waitFor(t, time.Minute, func() bool { return c.Stats().InFlight == 0 }, func() string { return fmt.Sprintf("%+v", c.Stats()) })
}

func waitFor(t *testing.T, d time.Duration, cond func() bool, why func() string) {
	t.Helper()
	testenv.WaitFor(t, d, cond, why)
}

// wait receives from ch or fails the test after d.
func wait[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s: not within %s", what, d)
	}
	var zero T
	return zero
}

// counts counts handler calls per message id.
type counts struct {
	mu sync.Mutex
	m  map[string][]int // id -> delivery counts seen
}

func (c *counts) add(d *ferrybroker.Delivery) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string][]int{}
	}
	c.m[d.MessageID] = append(c.m[d.MessageID], d.DeliveryCount)
	return len(c.m[d.MessageID])
}

func (c *counts) get(id string) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.m[id]...)
}

func (c *counts) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

func parkedByID(got []Received) map[string]Received {
	out := map[string]Received{}
	for _, g := range got {
		out[g.ID] = g
	}
	return out
}

func fastRetry() ferrybroker.RedeliveryPolicy {
	return ferrybroker.RedeliveryPolicy{MaxDeliveries: 3, RetryDelay: time.Millisecond, MaxRetryDelay: 10 * time.Millisecond}
}

// ExerciseConsumer runs the consumer conformance suite: every broker's
// consumer passes it against the real broker. Each subtest takes a fresh
// setup from h and checks, through the consumer's stats, a recording hook
// and the broker's own count of unsettled messages:
//
//   - a delivery is acked only after its handler returned nil, and each
//     delivery is settled exactly once (hooks and Stats agree);
//   - a Delivery carries the message: id, type, route, payload, headers,
//     Redelivered and DeliveryCount on a retry;
//   - a poison error parks at once, with the park headers; a transient
//     error (a panic is one) is retried and parked on the last delivery
//     RedeliveryPolicy allows, with its count;
//   - a malformed message (a payload that is not JSON, a header the
//     consumer's Validate requires) is parked with its reason, without
//     the handler, delivered once: no hot loop;
//   - a handler that blocks keeps its message unacked through a Stop that
//     gives up on it, and a restarted consumer gets it again;
//   - Stop waits for the handlers in flight and acks what they committed;
//     what was not handled comes back to the next consumer, nothing twice;
//   - Concurrency handlers run at once, and while one is held, the acks
//     of the others do not settle it;
//   - the fault point after the handler (ferryfault.ConsumerAfterHandle,
//     set in the context Start is given) leaves the delivery unacked;
//   - a delivery whose park fails is retried, never acked (when the
//     harness can break parking);
//   - a consumer started while the broker is unreachable waits it out
//     and then consumes, and a Stop ends such a wait (when the harness
//     can cut the broker off);
//   - Stop is safe before Start and twice; Run stops when its context ends.
//
// Verdicts wait on signals or poll with deadlines, never on sleeps.
func ExerciseConsumer(t *testing.T, h ConsumerHarness) {
	setup := func(t *testing.T) *consumerBundle {
		return &consumerBundle{ConsumerSetup: h.New(t), ctx: ctxFor(t)}
	}

	t.Run("AcksOnlyAfterTheHandlerReturnedNil", func(t *testing.T) {
		b := setup(t)
		ids := b.publish(t, 50)
		var seen counts
		c, rec := b.start(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
			seen.add(d)
			return nil
		}, ConsumerOptions{Concurrency: 4})
		waitFor(t, time.Minute, func() bool { return c.Stats().Acked == 50 }, func() string { return fmt.Sprintf("%+v", c.Stats()) })
		require.NoError(t, c.Stop(b.ctx))
		st := rec.agrees(t, c)
		require.Equal(t, ferrybroker.ConsumerStats{Delivered: 50, Handled: 50, Acked: 50}, st)
		for _, id := range ids {
			require.Equal(t, []int{1}, seen.get(id), "message %s handled once, on its first delivery", id)
		}
		b.unsettled(t, 0)
	})

	t.Run("DeliveryCarriesTheMessage", func(t *testing.T) {
		b := setup(t)
		id := b.publish(t, 1)[0]
		got := make(chan ferrybroker.Delivery, 2)
		c, rec := b.start(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
			got <- *d
			if !d.Redelivered {
				return errors.New("try again")
			}
			return nil
		}, ConsumerOptions{Redelivery: fastRetry()})
		first := wait(t, got, time.Minute, "first delivery")
		second := wait(t, got, time.Minute, "second delivery")
		idle(t, c)
		require.NoError(t, c.Stop(b.ctx))
		rec.agrees(t, c)
		require.Equal(t, id, first.MessageID)
		require.Equal(t, "OrderPaid", first.Type)
		require.Equal(t, b.Route, first.Route)
		require.JSONEq(t, `{"n":1}`, string(first.Payload))
		require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", first.Headers["traceparent"])
		require.False(t, first.Redelivered)
		require.Equal(t, 1, first.DeliveryCount)
		require.True(t, second.Redelivered)
		require.Equal(t, 2, second.DeliveryCount)
	})

	t.Run("PoisonIsParkedAtOnceWithItsReason", func(t *testing.T) {
		b := setup(t)
		ids := b.publish(t, 3)
		poison := ids[1]
		var seen counts
		c, rec := b.start(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
			seen.add(d)
			if d.MessageID == poison {
				return ferrytype.Poison(errors.New("unknown currency XXX"))
			}
			return nil
		}, ConsumerOptions{Redelivery: fastRetry()})
		waitFor(t, time.Minute, func() bool { s := c.Stats(); return s.Parked == 1 && s.Acked == 2 },
			func() string { return fmt.Sprintf("%+v", c.Stats()) })
		require.NoError(t, c.Stop(b.ctx))
		st := rec.agrees(t, c)
		require.Equal(t, ferrybroker.ConsumerStats{Delivered: 3, Handled: 3, Acked: 2, Parked: 1}, st)
		require.Equal(t, []int{1}, seen.get(poison), "a poison message is not retried")
		p := parkedByID(b.Parked(t, 1, time.Minute))
		require.Len(t, p, 1)
		got := p[poison]
		require.Contains(t, got.Headers[ferrybroker.HeaderParkReason], "unknown currency XXX")
		require.Equal(t, "1", got.Headers[ferrybroker.HeaderParkDeliveryCount])
		require.Equal(t, b.Route, got.Headers[ferrybroker.HeaderParkRoute])
		require.NotEmpty(t, got.Headers[ferrybroker.HeaderParkSource])
		_, err := time.Parse(time.RFC3339Nano, got.Headers[ferrybroker.HeaderParkedAt])
		require.NoError(t, err, "park time")
		require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", got.Headers["traceparent"],
			"the original's headers are kept")
		require.JSONEq(t, `{"n":2}`, string(got.Payload))
		b.unsettled(t, 0)
	})

	t.Run("TransientFailureIsRetriedThenParkedAtTheLimit", func(t *testing.T) {
		b := setup(t)
		ids := b.publish(t, 2)
		failing, recovering := ids[0], ids[1]
		var seen counts
		c, rec := b.start(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
			n := seen.add(d)
			if d.MessageID == failing || n < 3 {
				return errors.New("points service unavailable")
			}
			return nil
		}, ConsumerOptions{Redelivery: fastRetry()})
		waitFor(t, time.Minute, func() bool { s := c.Stats(); return s.Parked == 1 && s.Acked == 1 },
			func() string { return fmt.Sprintf("%+v", c.Stats()) })
		require.NoError(t, c.Stop(b.ctx))
		st := rec.agrees(t, c)
		require.Equal(t, ferrybroker.ConsumerStats{Delivered: 6, Handled: 6, Acked: 1, Retried: 4, Parked: 1}, st)
		require.Equal(t, []int{1, 2, 3}, seen.get(failing), "parked on its third delivery")
		require.Equal(t, []int{1, 2, 3}, seen.get(recovering), "acked on its third delivery")
		p := parkedByID(b.Parked(t, 1, time.Minute))
		require.Len(t, p, 1)
		require.Contains(t, p[failing].Headers[ferrybroker.HeaderParkReason], "failed on delivery 3 of at most 3: points service unavailable")
		require.Equal(t, "3", p[failing].Headers[ferrybroker.HeaderParkDeliveryCount])
		b.unsettled(t, 0)
	})

	t.Run("PanicIsATransientFailure", func(t *testing.T) {
		b := setup(t)
		id := b.publish(t, 1)[0]
		c, rec := b.start(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
			panic("nil map")
		}, ConsumerOptions{Redelivery: ferrybroker.RedeliveryPolicy{MaxDeliveries: 2, RetryDelay: time.Millisecond}})
		waitFor(t, time.Minute, func() bool { return c.Stats().Parked == 1 }, func() string { return fmt.Sprintf("%+v", c.Stats()) })
		require.NoError(t, c.Stop(b.ctx))
		st := rec.agrees(t, c)
		require.Equal(t, ferrybroker.ConsumerStats{Delivered: 2, Handled: 2, Retried: 1, Parked: 1}, st)
		p := parkedByID(b.Parked(t, 1, time.Minute))
		require.Contains(t, p[id].Headers[ferrybroker.HeaderParkReason], "handler panicked: nil map")
	})

	t.Run("MalformedMessagesAreParkedWithAReason", func(t *testing.T) {
		b := setup(t)
		b.Publish(t, RawMessage{ID: "garbage", Payload: []byte("\x00\xffnot json {")})
		b.Publish(t, RawMessage{ID: "no-headers", Payload: []byte(`{"n":1}`)})
		good := b.publish(t, 1)[0]
		var seen counts
		c, rec := b.start(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
			seen.add(d)
			return nil
		}, ConsumerOptions{Redelivery: fastRetry(), Validate: ferrybroker.RequireHeaders(ferrybroker.HeaderEventID, ferrybroker.HeaderEventType)})
		waitFor(t, time.Minute, func() bool { s := c.Stats(); return s.Parked == 2 && s.Acked == 1 },
			func() string { return fmt.Sprintf("%+v", c.Stats()) })
		require.NoError(t, c.Stop(b.ctx))
		st := rec.agrees(t, c)
		require.Equal(t, ferrybroker.ConsumerStats{Delivered: 3, Handled: 1, Acked: 1, Parked: 2}, st,
			"each delivered once: no hot loop")
		require.Equal(t, 1, seen.distinct(), "the handler never sees a malformed message")
		require.Len(t, seen.get(good), 1)
		p := parkedByID(b.Parked(t, 2, time.Minute))
		require.Len(t, p, 2)
		require.Contains(t, p["garbage"].Headers[ferrybroker.HeaderParkReason], "malformed message: payload is not valid JSON")
		require.Contains(t, p["no-headers"].Headers[ferrybroker.HeaderParkReason],
			"malformed message: missing header "+ferrybroker.HeaderEventID)
		require.Equal(t, "\x00\xffnot json {", string(p["garbage"].Payload))
		b.unsettled(t, 0)
	})

	t.Run("BlockedHandlerKeepsItsMessageUntilARestart", func(t *testing.T) {
		b := setup(t)
		id := b.publish(t, 1)[0]
		started := make(chan struct{}, 1)
		c, rec := b.start(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
			started <- struct{}{}
			<-ctx.Done() // blocks until Stop gives up on it
			return ctx.Err()
		}, ConsumerOptions{Concurrency: 1})
		wait(t, started, time.Minute, "handler started")
		require.Zero(t, c.Stats().Acked)
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		require.Error(t, c.Stop(ended), "Stop gave up on a handler still running")
		idle(t, c)
		st := rec.agrees(t, c)
		require.Equal(t, int64(1), st.Handled, "%+v", st)
		require.Zero(t, st.Acked, "%+v", st)
		require.Positive(t, st.Left, "%+v", st)
		b.unsettled(t, 1) // the cut-off delivery is not acked

		got := make(chan *ferrybroker.Delivery, 1)
		c2, rec2 := b.start(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
			got <- d
			return nil
		}, ConsumerOptions{Concurrency: 1})
		d := wait(t, got, time.Minute, "redelivery after the restart")
		// Redelivered is not checked: JetStream does not count a delivery
		// it made to a consumer that had stopped listening.
		require.Equal(t, id, d.MessageID)
		waitFor(t, time.Minute, func() bool { return c2.Stats().Acked == 1 }, nil)
		require.NoError(t, c2.Stop(b.ctx))
		rec2.agrees(t, c2)
		b.unsettled(t, 0)
	})

	t.Run("StopWaitsForHandlersInFlightAndLosesNothing", func(t *testing.T) {
		b := setup(t)
		ids := b.publish(t, 20)
		gate := make(chan struct{})
		started := make(chan struct{}, 20)
		var running, finished atomic.Int64
		var seen counts
		handler := func(ctx context.Context, d *ferrybroker.Delivery) error {
			running.Add(1)
			started <- struct{}{}
			<-gate
			seen.add(d)
			finished.Add(1)
			return nil
		}
		c, rec := b.start(t, handler, ConsumerOptions{Concurrency: 2})
		wait(t, started, time.Minute, "first handler")
		wait(t, started, time.Minute, "second handler")
		stopped := make(chan error, 1)
		go func() { stopped <- c.Stop(b.ctx) }()
		go close(gate)
		require.NoError(t, wait(t, stopped, time.Minute, "Stop"))
		// Stop returned: every handler that started has finished, and
		// what finished is acked.
		require.Equal(t, running.Load(), finished.Load(), "Stop returned with handlers running")
		st := rec.agrees(t, c)
		require.GreaterOrEqual(t, st.Acked, int64(2))
		require.Equal(t, finished.Load(), st.Acked, "every handler that returned nil is acked by the time Stop returns")
		b.unsettled(t, 20-int(st.Acked)) // nothing acked that was not handled

		c2, rec2 := b.start(t, handler, ConsumerOptions{Concurrency: 2})
		waitFor(t, time.Minute, func() bool { return seen.distinct() == 20 }, func() string { return fmt.Sprintf("%+v", c2.Stats()) })
		idle(t, c2)
		require.NoError(t, c2.Stop(b.ctx))
		st2 := rec2.agrees(t, c2)
		require.Equal(t, int64(20), st.Acked+st2.Acked, "nothing lost, nothing handled twice")
		for _, id := range ids {
			require.Len(t, seen.get(id), 1, id)
		}
		b.unsettled(t, 0)
	})

	t.Run("ConcurrentHandlersRunInParallelAndNeverAckPastOneInFlight", func(t *testing.T) {
		b := setup(t)
		const conc, n = 4, 24
		ids := b.publish(t, n)
		slow := ids[0] // delivered among the first, held while the rest are acked
		var running atomic.Int64
		allIn := make(chan struct{})
		slowStarted := make(chan struct{})
		var seen counts
		c, rec := b.start(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
			seen.add(d)
			if running.Add(1) == conc {
				close(allIn) // conc handlers are running at once
			}
			select {
			case <-allIn:
			case <-ctx.Done():
				return ctx.Err()
			}
			if d.MessageID == slow {
				close(slowStarted)
				<-ctx.Done() // until Stop gives up on it
				return ctx.Err()
			}
			return nil
		}, ConsumerOptions{Concurrency: conc})
		wait(t, allIn, time.Minute, fmt.Sprintf("%d handlers running at once", conc))
		wait(t, slowStarted, time.Minute, "the slow handler")
		waitFor(t, time.Minute, func() bool { return c.Stats().Acked == n-1 }, func() string { return fmt.Sprintf("%+v", c.Stats()) })
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		_ = c.Stop(ended)
		idle(t, c)
		st := rec.agrees(t, c)
		require.Equal(t, int64(n-1), st.Acked)
		// At least the slow one is left; a broker may hand it back to the
		// stopping consumer once more, which leaves it again.
		require.Positive(t, st.Left)
		b.unsettled(t, 1) // the acks of later deliveries did not take the slow one with them

		got := make(chan string, n)
		c2, rec2 := b.start(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
			got <- d.MessageID
			return nil
		}, ConsumerOptions{Concurrency: conc})
		require.Equal(t, slow, wait(t, got, time.Minute, "redelivery of the slow message"))
		waitFor(t, time.Minute, func() bool { return c2.Stats().Acked == 1 }, nil)
		require.NoError(t, c2.Stop(b.ctx))
		rec2.agrees(t, c2)
		require.Empty(t, got, "only the slow message came again")
		b.unsettled(t, 0)
	})

	t.Run("FaultAfterHandleLeavesTheDeliveryUnacked", func(t *testing.T) {
		b := setup(t)
		ids := b.publish(t, 3)
		handled := make(chan struct{}, 3)
		crash := ferryfault.With(b.ctx, func(_ context.Context, point string) error {
			if point == ferryfault.ConsumerAfterHandle {
				return errors.New("crash")
			}
			return nil
		})
		c, rec := b.startWith(t, crash, func(ctx context.Context, d *ferrybroker.Delivery) error {
			select {
			case handled <- struct{}{}:
			default:
			}
			return nil
		}, ConsumerOptions{Concurrency: 1})
		wait(t, handled, time.Minute, "a handler committed")
		require.NoError(t, c.Stop(b.ctx))
		idle(t, c)
		st := rec.agrees(t, c)
		require.Zero(t, st.Acked, "nothing acked past the fault point")
		b.unsettled(t, 3)

		var seen counts
		c2, rec2 := b.start(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
			seen.add(d)
			return nil
		}, ConsumerOptions{Concurrency: 1})
		waitFor(t, time.Minute, func() bool { return c2.Stats().Acked == 3 }, func() string { return fmt.Sprintf("%+v", c2.Stats()) })
		require.NoError(t, c2.Stop(b.ctx))
		rec2.agrees(t, c2)
		for _, id := range ids {
			require.Len(t, seen.get(id), 1, "every message came back, the handled one included: %s", id)
		}
		b.unsettled(t, 0)
	})

	t.Run("FailedParkIsRetriedNeverAcked", func(t *testing.T) {
		b := setup(t)
		if b.BreakParking == nil {
			t.Skip("the harness cannot break parking")
		}
		handled := make(chan struct{}, 1)
		c, rec := b.start(t, func(ctx context.Context, d *ferrybroker.Delivery) error {
			select {
			case handled <- struct{}{}:
			default:
			}
			return ferrytype.Poison(errors.New("unknown currency XXX"))
		}, ConsumerOptions{Concurrency: 1, Redelivery: fastRetry()})
		b.BreakParking(t)
		b.publish(t, 1)
		wait(t, handled, time.Minute, "the handler ran")
		waitFor(t, time.Minute, func() bool { s := c.Stats(); return s.ParkFailed >= 2 && s.Retried >= 1 },
			func() string { return fmt.Sprintf("%+v", c.Stats()) })
		require.NoError(t, c.Stop(b.ctx))
		idle(t, c)
		st := rec.agrees(t, c)
		require.Zero(t, st.Acked, "%+v", st)
		require.Zero(t, st.Parked, "no copy was stored: %+v", st)
		b.unsettled(t, 1) // never acked without a stored copy
	})

	t.Run("StartDuringAnOutageWaitsItOut", func(t *testing.T) {
		b := setup(t)
		if b.Outage == nil {
			t.Skip("the harness cannot cut the broker off")
		}
		ids := b.publish(t, 5)
		out := b.Outage(t)
		restored := false
		t.Cleanup(func() {
			if !restored {
				out.Restore()
			}
		})
		rec := newRecorder()
		c := b.NewConsumer(t, func(context.Context, *ferrybroker.Delivery) error { return nil },
			ConsumerOptions{Concurrency: 2, Hooks: []ferrybroker.Hook{rec}})
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = c.Stop(ctx)
		})
		base := out.Refused()
		started := make(chan error, 1)
		go func() { started <- c.Start(b.ctx) }()
		// It tries, and tries again, without giving up.
		waitFor(t, time.Minute, func() bool {
			select {
			case err := <-started:
				t.Fatalf("Start returned while the broker was unreachable: %v", err)
			default:
			}
			return out.Refused() >= base+3
		}, func() string { return fmt.Sprintf("%d connections tried", out.Refused()-base) })
		out.Restore()
		restored = true
		require.NoError(t, wait(t, started, time.Minute, "Start returns once the broker is back"))
		waitFor(t, time.Minute, func() bool { return c.Stats().Acked == int64(len(ids)) },
			func() string { return fmt.Sprintf("%+v", c.Stats()) })
		rec.agrees(t, c)
		require.NoError(t, c.Stop(b.ctx))
		b.unsettled(t, 0)
	})

	t.Run("StopEndsAStartWaitingForTheBroker", func(t *testing.T) {
		b := setup(t)
		if b.Outage == nil {
			t.Skip("the harness cannot cut the broker off")
		}
		out := b.Outage(t)
		t.Cleanup(out.Restore)
		c := b.NewConsumer(t, func(context.Context, *ferrybroker.Delivery) error { return nil }, ConsumerOptions{Concurrency: 1})
		base := out.Refused()
		started := make(chan error, 1)
		go func() { started <- c.Start(b.ctx) }()
		waitFor(t, time.Minute, func() bool { return out.Refused() > base }, func() string { return "no connection tried" })
		require.NoError(t, c.Stop(b.ctx))
		require.ErrorIs(t, wait(t, started, time.Minute, "Start returns after the Stop"), ferrytype.ErrClosed)
	})

	t.Run("StopIsSafeTwiceAndBeforeStart", func(t *testing.T) {
		b := setup(t)
		c := b.NewConsumer(t, func(context.Context, *ferrybroker.Delivery) error { return nil }, ConsumerOptions{Concurrency: 1})
		require.NoError(t, c.Stop(b.ctx), "before Start")
		require.ErrorIs(t, c.Start(b.ctx), ferrytype.ErrClosed, "a stopped consumer does not start")
		c2, _ := b.start(t, func(context.Context, *ferrybroker.Delivery) error { return nil }, ConsumerOptions{Concurrency: 1})
		require.NoError(t, c2.Stop(b.ctx))
		require.NoError(t, c2.Stop(b.ctx))
	})

	t.Run("RunStopsWhenItsContextEnds", func(t *testing.T) {
		b := setup(t)
		b.publish(t, 5)
		c := b.NewConsumer(t, func(context.Context, *ferrybroker.Delivery) error { return nil }, ConsumerOptions{Concurrency: 2})
		ctx, cancel := context.WithCancel(b.ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		waitFor(t, time.Minute, func() bool { return c.Stats().Acked == 5 }, func() string { return fmt.Sprintf("%+v", c.Stats()) })
		cancel()
		require.NoError(t, wait(t, done, time.Minute, "Run returns"))
		b.unsettled(t, 0)
	})
}

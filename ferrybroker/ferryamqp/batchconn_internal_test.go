package ferryamqp

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker/ferryamqp/ferryamqptest"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

// countingConn counts the writes that reach the socket.
type countingConn struct {
	net.Conn
	mu     sync.Mutex
	writes int
	bytes  []byte
	fail   error
	closed bool
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return 0, c.fail
	}
	c.writes++
	c.bytes = append(c.bytes, p...)
	return len(p), nil
}

func (c *countingConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

func (c *countingConn) count() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes, string(c.bytes)
}

// Writes pass straight through when nobody holds the connection, collect
// while someone does, and go out in the order they were made when a holder
// releases, or when they pass batchFlushBytes.
func TestBatchConnHoldsWritesInOrder(t *testing.T) {
	sock := &countingConn{}
	c := &batchConn{Conn: sock}
	write := func(s string) {
		n, err := c.Write([]byte(s))
		require.NoError(t, err)
		require.Equal(t, len(s), n)
	}
	write("a")
	n, got := sock.count()
	require.Equal(t, 1, n)
	require.Equal(t, "a", got)

	c.hold()
	c.hold()
	write("b")
	write("c")
	n, _ = sock.count()
	require.Equal(t, 1, n, "held: nothing written yet")
	c.release()
	n, got = sock.count()
	require.Equal(t, 2, n, "a release writes what was collected, once")
	require.Equal(t, "abc", got)
	write("d")
	n, _ = sock.count()
	require.Equal(t, 2, n, "still held by the other")
	c.release()
	n, got = sock.count()
	require.Equal(t, 3, n)
	require.Equal(t, "abcd", got)

	c.hold()
	big := make([]byte, batchFlushBytes)
	for i := range big {
		big[i] = 'x'
	}
	write("e")
	write(string(big))
	n, got = sock.count()
	require.Equal(t, 4, n, "past batchFlushBytes the collected bytes go out while held")
	require.Equal(t, "abcde"+string(big), got)
	write("f")
	c.release()
	n, got = sock.count()
	require.Equal(t, 5, n)
	require.Equal(t, "abcde"+string(big)+"f", got)
}

// A write that fails after its bytes were collected closes the socket (so
// the AMQP connection ends and every pending confirm ends unknown), and
// every later write fails with that error.
func TestBatchConnFailedFlushClosesTheSocket(t *testing.T) {
	sock := &countingConn{}
	c := &batchConn{Conn: sock}
	c.hold()
	_, err := c.Write([]byte("collected"))
	require.NoError(t, err)
	broken := errors.New("broken pipe")
	sock.mu.Lock()
	sock.fail = broken
	sock.mu.Unlock()
	c.release()
	require.True(t, sock.closed)
	_, err = c.Write([]byte("later"))
	require.ErrorIs(t, err, broken)
	c.hold()
	c.release()
	n, _ := sock.count()
	require.Zero(t, n)
}

// A publisher that dialled its connection writes a whole Publish call's
// messages in a few socket writes, not one per message, and every message
// is confirmed and in the queue; concurrent callers on several channels
// interleave whole frames only (RabbitMQ would close the connection on a
// torn frame).
func TestPublishBatchesSocketWrites(t *testing.T) {
	t.Parallel()
	conn := ferryamqptest.RabbitMQ(t)
	q := ferryamqptest.RabbitMQQueue(t, conn, "quorum", nil)
	ctx := testenv.Context(t, time.Minute)
	p, err := Dial(ctx, testenv.URL(testenv.EnvAMQP), nil)
	require.NoError(t, err)
	defer p.Close()
	s, err := p.link.current(ctx, 0)
	require.NoError(t, err)
	require.NotNil(t, s.batch)

	const n = 200
	msgs := testMsgs(n, func(int) string { return q.RoutingKey })
	before := s.batch.socketWrites()
	for _, r := range p.Publish(ctx, msgs) {
		require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome, "%v", r.Err)
	}
	writes := s.batch.socketWrites() - before
	require.Less(t, writes, int64(n/10), "%d socket writes for %d messages", writes, n)

	var wg sync.WaitGroup
	results := make([][]ferrytype.PublishResult, 8)
	more := testMsgs(8*50, func(int) string { return q.RoutingKey })
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = p.Publish(ctx, more[i*50:(i+1)*50])
		}()
	}
	wg.Wait()
	for _, rs := range results {
		for _, r := range rs {
			require.Equal(t, ferrytype.OutcomeConfirmed, r.Outcome, "%v", r.Err)
		}
	}
	got := ids(ferryamqptest.ReadRabbitMQQueue(t, conn, q.Name, n+len(more), time.Minute))
	require.Len(t, got, n+len(more))
}

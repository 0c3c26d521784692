package ferryamqp

import (
	"net"
	"sync"
)

// batchFlushBytes is how much a held batchConn collects before it writes
// anyway: a few dozen messages of a few KiB, well inside a socket's send
// buffer.
const batchFlushBytes = 64 << 10

// batchConn is the socket under a connection ferryamqp dialled. amqp091-go
// flushes after every message, and on loopback or a fast network each of
// those writes costs a system call and a TCP segment on both sides, the
// largest share of a relay's CPU per event. While a publisher writes a
// batch it holds the connection: the flushes collect in memory, and go to
// the socket in one write when a holder releases it (its batch is whole:
// whatever others collected goes with it), or when they pass
// batchFlushBytes. A holder releases before it waits for anything.
// Bytes go out in the order amqp091-go wrote them, whoever holds.
//
// A write that fails after the bytes were collected cannot be reported to
// the publish that wrote them: the socket is closed instead, so amqp091-go
// sees the connection end, and every publish whose confirm is pending ends
// as an unknown outcome, as with any connection lost before the confirm.
type batchConn struct {
	net.Conn

	mu    sync.Mutex
	holds int
	buf   []byte
	err   error // the write that failed; every later write fails with it
	// writes counts the writes that reached the socket.
	writes int64
}

func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if c.holds == 0 && len(c.buf) == 0 {
		c.writes++
		return c.Conn.Write(p)
	}
	c.buf = append(c.buf, p...)
	if c.holds == 0 || len(c.buf) >= batchFlushBytes {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// socketWrites returns how many writes reached the socket.
func (c *batchConn) socketWrites() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

// hold starts collecting writes until the matching release.
func (c *batchConn) hold() {
	c.mu.Lock()
	c.holds++
	c.mu.Unlock()
}

// release ends a hold and writes what was collected.
func (c *batchConn) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holds--
	_ = c.flushLocked()
}

// flushLocked writes the collected bytes; c.mu held.
func (c *batchConn) flushLocked() error {
	if len(c.buf) == 0 || c.err != nil {
		return c.err
	}
	c.writes++
	_, err := c.Conn.Write(c.buf)
	if cap(c.buf) > 4*batchFlushBytes {
		c.buf = nil
	} else {
		c.buf = c.buf[:0]
	}
	if err != nil {
		c.err = err
		_ = c.Conn.Close()
	}
	return err
}

// holder is one writer's hold on a batchConn (nil: none), released before
// the writer waits and taken again after.
type holder struct {
	c    *batchConn
	held bool
}

func (h *holder) hold() {
	if h.c != nil && !h.held {
		h.c.hold()
		h.held = true
	}
}

func (h *holder) release() {
	if h.held {
		h.c.release()
		h.held = false
	}
}

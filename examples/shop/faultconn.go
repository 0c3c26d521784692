package shop

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync/atomic"
)

// EnvCommitResetPct arms the commit fault: this percent of COMMITs kill
// their connection before the server's answer can be read. Half the time
// the COMMIT reaches the server first (it commits), half the time it is
// lost with the connection (the server rolls back); the client cannot tell
// which. The database knows; the checker reads it.
const EnvCommitResetPct = "SHOP_COMMIT_RESET_PCT"

// CommitResets counts the commits the fault cut off in this process.
var CommitResets atomic.Int64

func commitResetPct() int {
	n, _ := strconv.Atoi(os.Getenv(EnvCommitResetPct))
	return n
}

// commitResetDial wraps dial: connections it makes die after some COMMITs.
func commitResetDial(pct int, dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &commitResetConn{Conn: c, pct: pct}, nil
	}
}

type commitResetConn struct {
	net.Conn
	pct int
}

// isCommit recognises a COMMIT on the wire: MySQL's COM_QUERY packet
// (3-byte length, sequence, 0x03, "COMMIT") or PostgreSQL's simple query
// message ('Q', int32 length, "commit\x00").
func isCommit(p []byte) bool {
	switch {
	case len(p) > 5 && p[4] == 0x03:
		return bytes.EqualFold(p[5:], []byte("COMMIT"))
	case len(p) > 5 && p[0] == 'Q':
		return bytes.EqualFold(bytes.TrimRight(p[5:], "\x00"), []byte("COMMIT"))
	}
	return false
}

func (c *commitResetConn) Write(p []byte) (int, error) {
	if !isCommit(p) || rand.IntN(100) >= c.pct {
		return c.Conn.Write(p)
	}
	CommitResets.Add(1)
	if rand.IntN(2) == 0 {
		// The COMMIT is lost with the connection: the server rolls back.
		// The client believes it sent it and waits for an answer in vain.
		if tc, ok := c.Conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Conn.Close()
		return len(p), nil
	}
	// The COMMIT reaches the server, the answer never reaches the client.
	n, err := c.Conn.Write(p)
	_ = c.Conn.Close()
	return n, err
}

package faultnet

import (
	"net"
	"sync"
	"sync/atomic"
)

// Listener wraps the listener of an in-process server (a kfake broker) so
// that a test can cut it off the network as Proxy cuts a server it does not
// run: while cut, every open connection is closed and every new one is
// closed as soon as it is accepted. The server keeps its address, so that
// clients reconnect to it once it is restored. Use it where a proxy cannot
// stand in front of the server, such as a Kafka broker that advertises its
// own address to clients.
type Listener struct {
	net.Listener

	mu      sync.Mutex
	cut     bool
	conns   map[net.Conn]struct{}
	refused atomic.Int64
}

// WrapListener returns ln as a Listener, not cut.
func WrapListener(ln net.Listener) *Listener {
	return &Listener{Listener: ln, conns: map[net.Conn]struct{}{}}
}

// Accept returns the next connection accepted while the listener is not
// cut; connections accepted while it is cut are closed at once.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.cut {
			l.mu.Unlock()
			l.refused.Add(1)
			c.Close()
			continue
		}
		tc := &trackedConn{Conn: c, l: l}
		l.conns[tc] = struct{}{}
		l.mu.Unlock()
		return tc, nil
	}
}

// Cut closes every open connection and refuses new ones until Restore.
func (l *Listener) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for c := range l.conns {
		c.(*trackedConn).Conn.Close()
		delete(l.conns, c)
	}
}

// Refused counts the connections closed on accept while cut: how often
// clients tried to reach the server meanwhile.
func (l *Listener) Refused() int64 { return l.refused.Load() }

// Restore accepts new connections again.
func (l *Listener) Restore() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = false
}

// Drop closes every open connection without refusing new ones: clients
// see their connections break mid-request and reconnect at once.
func (l *Listener) Drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		c.(*trackedConn).Conn.Close()
		delete(l.conns, c)
	}
}

type trackedConn struct {
	net.Conn
	l *Listener
}

func (c *trackedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

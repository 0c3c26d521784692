package ferryamqp

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry/ferrytype"
)

// nodes is what Dial, DialConsumer and Connect were given: the AMQP URL
// of one RabbitMQ node, or a comma-separated list of the URLs of the
// nodes of one cluster, which the connection tries in turn (dial).
type nodes struct {
	urls  []string // one a node, as given (trimmed, for a list)
	addrs []string // urls without their passwords, for errors and logs
	vhost string   // the virtual host, the same at every node

	mu   sync.Mutex
	last int // the node last connected to; -1 before the first connection
}

// urlStart matches the scheme that begins a URL.
var urlStart = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// splitURLs splits raw, a broker URL, into the URLs of its nodes. raw is
// a list when a comma is followed by another URL (a scheme and ://) or by
// nothing (an empty element, which is returned empty); else it is one
// URL, returned whole, commas and all, as amqp091-go reads it. In a list
// a comma followed by anything else is part of the URL before it (a
// password's, say), and each URL is trimmed of spaces.
func splitURLs(raw string) []string {
	pieces := strings.Split(raw, ",")
	list := false
	for _, p := range pieces[1:] {
		if t := strings.TrimSpace(p); t == "" || urlStart.MatchString(t) {
			list = true
		}
	}
	if !list {
		return []string{raw}
	}
	out := []string{pieces[0]}
	for _, p := range pieces[1:] {
		if t := strings.TrimSpace(p); t != "" && !urlStart.MatchString(t) {
			out[len(out)-1] += "," + p
			continue
		}
		out = append(out, p)
	}
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

// parseNodes reads the broker URL raw: one amqp:// or amqps:// URL, or a
// comma-separated list of them, each a node of one cluster in the same
// virtual host. A single URL is checked as amqp091-go reads it, as
// before lists existed (see splitURLs).
func parseNodes(raw string) (*nodes, error) {
	elems := splitURLs(raw)
	if len(elems) == 1 {
		uri, err := amqp.ParseURI(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: broker URL %s: %s", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(raw), ferrytype.RedactURL(err.Error()))
		}
		return &nodes{urls: []string{raw}, addrs: []string{ferrytype.RedactURL(raw)}, vhost: uri.Vhost, last: -1}, nil
	}
	bad := func(format string, args ...any) error {
		return ferrytype.RedactError(fmt.Errorf("%w: broker URL %s: %s", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(raw),
			fmt.Sprintf(format, args...)), raw)
	}
	n := &nodes{last: -1}
	for i, e := range elems {
		if e == "" {
			return nil, bad("node %d of the %d comma-separated URLs is empty (a stray comma?)", i+1, len(elems))
		}
		uri, err := amqp.ParseURI(e)
		if err != nil {
			return nil, bad("node %d (%s): %s; write each node as a whole URL, amqp://user:password@host:port/vhost, comma-separated",
				i+1, ferrytype.RedactURL(e), ferrytype.RedactURL(err.Error()))
		}
		if i == 0 {
			n.vhost = uri.Vhost
		} else if uri.Vhost != n.vhost {
			return nil, bad("node 1 names virtual host %q and node %d %q: list the nodes of one cluster with the same virtual host",
				n.vhost, i+1, uri.Vhost)
		}
		n.urls = append(n.urls, e)
		n.addrs = append(n.addrs, ferrytype.RedactURL(e))
	}
	return n, nil
}

// order returns the nodes in the order the next connection tries them:
// from the one after the node last connected to (the first node at
// first), round the list once.
func (n *nodes) order() []int {
	n.mu.Lock()
	start := (n.last + 1) % len(n.urls)
	n.mu.Unlock()
	out := make([]int, len(n.urls))
	for i := range out {
		out[i] = (start + i) % len(n.urls)
	}
	return out
}

// reached records that a connection to node i opened.
func (n *nodes) reached(i int) {
	n.mu.Lock()
	n.last = i
	n.mu.Unlock()
}

// dialFunc opens a connection for a link, returning the socket under it
// and, when there are several nodes, the address (without credentials)
// of the node it reached: "" for a single URL.
type dialFunc func() (conn *amqp.Connection, batch *batchConn, node string, err error)

// dialer returns the dial function of the nodes: it tries them in the
// order order gives and returns the first connection that opens, or an
// error that says why each node failed. Errors never contain a password.
func (n *nodes) dialer(c ConnectionConfig) dialFunc {
	dials := make([]func() (*amqp.Connection, *batchConn, error), len(n.urls))
	for i, u := range n.urls {
		dials[i] = dialURL(u, c)
	}
	return func() (*amqp.Connection, *batchConn, string, error) {
		var errs []error
		for _, i := range n.order() {
			conn, batch, err := dials[i]()
			if err == nil {
				n.reached(i)
				if len(n.urls) == 1 {
					return conn, batch, "", nil
				}
				return conn, batch, n.addrs[i], nil
			}
			errs = append(errs, err)
		}
		if len(errs) == 1 {
			return nil, nil, "", errs[0]
		}
		return nil, nil, "", &nodesError{errs: errs}
	}
}

// nodesError says why each node of a list refused a connection, in the
// order they were tried; errors.Is and errors.As see every node's error.
type nodesError struct{ errs []error }

func (e *nodesError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "none of the %d RabbitMQ nodes accepted a connection: ", len(e.errs))
	for i, err := range e.errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(err.Error())
	}
	return b.String()
}

func (e *nodesError) Unwrap() []error { return e.errs }

// dialURL returns a dial function for one node's url, which returns the
// connection and the socket under it. Errors never contain the password.
func dialURL(url string, c ConnectionConfig) func() (*amqp.Connection, *batchConn, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(c.Name)
	cfg := amqp.Config{
		Heartbeat:       c.Heartbeat,
		TLSClientConfig: c.TLS,
		Properties:      props,
	}
	dial := amqp.DefaultDial(c.DialTimeout)
	return func() (*amqp.Connection, *batchConn, error) {
		var batch *batchConn
		cfg := cfg
		cfg.Dial = func(network, addr string) (net.Conn, error) {
			raw, err := dial(network, addr)
			if err != nil {
				return nil, err
			}
			batch = &batchConn{Conn: raw}
			return batch, nil
		}
		conn, err := amqp.DialConfig(url, cfg)
		if err != nil {
			return nil, nil, ferrytype.RedactError(fmt.Errorf("connect to %s: %w", ferrytype.RedactURL(url), err), url)
		}
		return conn, batch, nil
	}
}

// SplitURL returns the URLs of the nodes a broker URL names, as Dial,
// DialConsumer and Connect read it: url itself when it is one URL, else
// each URL of its comma-separated list, trimmed of spaces (an empty
// element stays, empty). A comma not followed by another URL (a scheme
// and ://) or by nothing belongs to the URL before it. It checks nothing:
// see CheckURL.
func SplitURL(url string) []string { return splitURLs(url) }

// CheckURL checks a broker URL as Dial, DialConsumer and Connect do,
// without connecting: one amqp:// or amqps:// URL that amqp091-go
// parses, or a comma-separated list of them, none empty, all with the
// same virtual host. Its error wraps ferrytype.ErrInvalidConfig and
// never contains a password.
func CheckURL(url string) error {
	_, err := parseNodes(url)
	return err
}

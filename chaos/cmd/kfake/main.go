// Command kfake runs franz-go's kfake, an in-process fake of a Kafka
// cluster that speaks the real protocol, as a process of its own: the
// chaos suite's Kafka broker, which it can stop, start again and put
// behind proxies.
//
//	kfake -ports 19092,19093,19094 -advertise 127.0.0.1:29092,127.0.0.1:29093,127.0.0.1:29094 -data /tmp/kfake
//
// Each broker listens on its port of -ports (0: a free one) and tells
// clients, in its metadata, that it is at its address of -advertise (a
// proxy in front of it), so that every connection a client opens after
// the seed goes through the proxies too. With -data the cluster keeps its
// topics, records, committed offsets and producer ids in that directory
// and loads them at start: a cluster stopped with SIGTERM or SIGINT and
// started again with the same flags has lost nothing. It prints "kfake
// ready" and the listen addresses once the brokers listen.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	var (
		ports     = flag.String("ports", "0,0,0", "comma-separated ports, one per broker (0: a free one)")
		advertise = flag.String("advertise", "", "comma-separated host:port each broker advertises, in -ports order (default: its own)")
		data      = flag.String("data", "", "directory the cluster persists to and reloads from (default: memory only)")
		sync      = flag.Bool("sync", false, "fsync every produced batch (survives a machine crash, not only a process stop)")
	)
	flag.Parse()
	var ps []int
	for _, p := range strings.Split(*ports, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 || n > 65535 {
			fail(fmt.Errorf("-ports: %q is not a port", p))
		}
		ps = append(ps, n)
	}
	var adv []string
	if *advertise != "" {
		adv = strings.Split(*advertise, ",")
		if len(adv) != len(ps) {
			fail(fmt.Errorf("-advertise names %d addresses for %d ports", len(adv), len(ps)))
		}
		for _, a := range adv {
			if _, _, err := net.SplitHostPort(a); err != nil {
				fail(fmt.Errorf("-advertise: %w", err))
			}
		}
	}
	// kfake creates its brokers' listeners in -ports order and advertises
	// each listener's Addr.
	next := 0
	listen := func(network, address string) (net.Listener, error) {
		ln, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		i := next
		next++
		if i < len(adv) {
			return advertised{Listener: ln, addr: adv[i]}, nil
		}
		return ln, nil
	}
	opts := []kfake.Opt{kfake.Ports(ps...), kfake.ListenFn(listen)}
	if *data != "" {
		opts = append(opts, kfake.DataDir(*data))
	}
	if *sync {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fail(err)
	}
	fmt.Printf("kfake ready: %d brokers, advertised as %s\n", len(ps), strings.Join(c.ListenAddrs(), ","))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	c.Close() // persists the state with -data
	fmt.Println("kfake stopped")
}

// advertised is a listener whose Addr is the address clients are told to
// connect to: kfake advertises a broker's listener address.
type advertised struct {
	net.Listener
	addr string
}

func (a advertised) Addr() net.Addr { return advertisedAddr(a.addr) }

type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kfake:", err)
	os.Exit(2)
}

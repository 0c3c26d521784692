package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrydev/ferry/examples/shop"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
)

// kafkaBrokers is the number of brokers of the kfake cluster.
const kafkaBrokers = 3

// kafkaBroker is a kfake cluster of three brokers run as a process of its
// own (cmd/kfake), so that the harness can stop and start it; each broker
// listens on a fixed loopback port, where a network scenario puts a proxy
// of its own in front, and advertises the proxy's address, so that every
// connection a client makes (the seed's and each broker's) goes through
// the proxies. The cluster
// persists to a directory: a restart keeps topics, records, committed
// offsets and producer ids.
type kafkaBroker struct {
	proc    *shop.Proc
	ports   []string // the brokers' own ports
	proxied string   // kafka://proxy1,proxy2,proxy3
	data    string

	mu sync.Mutex // guards client, opened by the first publishPaid
	cl *kgo.Client
}

func newKafkaBroker(ctx context.Context, o Options, px *proxies) (*kafkaBroker, error) {
	if o.KfakeBin == "" {
		return nil, errors.New("Options.KfakeBin is not set (BuildKfake)")
	}
	b := &kafkaBroker{data: filepath.Join(o.Dir, "kfake")}
	var seeds []string
	for i := 0; i < kafkaBrokers; i++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addr, err := px.add("broker", "127.0.0.1:"+port)
		if err != nil {
			return nil, err
		}
		b.ports = append(b.ports, port)
		seeds = append(seeds, addr)
	}
	b.proxied = "kafka://" + strings.Join(seeds, ",")
	b.proc = &shop.Proc{Name: "kafka", Bin: o.KfakeBin, Log: o.Log, Args: []string{
		"-ports", strings.Join(b.ports, ","), "-advertise", strings.Join(seeds, ","), "-data", b.data}}
	if err := b.start(ctx); err != nil {
		b.close()
		return nil, err
	}
	if err := shop.SetupKafka(ctx, b.proxied); err != nil {
		b.close()
		return nil, fmt.Errorf("create the shop's topics: %w", err)
	}
	return b, nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	return port, err
}

// start starts kfake and waits until every broker accepts connections.
func (b *kafkaBroker) start(ctx context.Context) error {
	if err := b.proc.Start(); err != nil {
		return err
	}
	addrs := make([]string, len(b.ports))
	for i, port := range b.ports {
		addrs[i] = "127.0.0.1:" + port
	}
	return waitListening(ctx, b.proc, addrs...)
}

// waitListening waits up to 30 s until every addr accepts a TCP
// connection, and fails early when p, the process that is to listen on
// them, exits.
func waitListening(ctx context.Context, p *shop.Proc, addrs ...string) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range addrs {
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				break
			}
			if !p.Running() {
				return fmt.Errorf("%s exited: %s; its last lines:\n%s", p.Name, p.State(), p.Tail())
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%s did not listen on %s: %w", p.Name, addr, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

func (b *kafkaBroker) url() string { return b.proxied }

func (b *kafkaBroker) relayArgs() []string {
	return []string{"--topics", strings.Join(shop.KafkaTopics, ",")}
}

func (b *kafkaBroker) quiet(ctx context.Context, _ bool) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return shop.KafkaQuiet(ctx, b.proxied)
}

func (b *kafkaBroker) pending(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lag, err := shop.KafkaLag(ctx, b.proxied)
	if err != nil {
		return "lag unknown: " + err.Error()
	}
	var parts []string
	for _, g := range []string{"points", "sms"} {
		if len(lag[g]) > 0 {
			parts = append(parts, "group "+g+" behind on "+strings.Join(lag[g], ", "))
		}
	}
	return strings.Join(parts, "; ")
}

func (b *kafkaBroker) parked(ctx context.Context) (map[string][]parkedMsg, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	recs, err := shop.KafkaParked(ctx, b.proxied, nil)
	if err != nil {
		return nil, err
	}
	out := map[string][]parkedMsg{}
	for g, rs := range recs {
		for _, r := range rs {
			out[g] = append(out[g], parkedMsg{ID: r.ID, Body: r.Body})
		}
	}
	return out, nil
}

// restart stops kfake (SIGTERM: it writes its state to its directory),
// waits down (or until ctx ends), and starts it again on the same ports
// and directory.
func (b *kafkaBroker) restart(ctx context.Context, down time.Duration) error {
	if b.proc.Stop(30*time.Second) == nil {
		_ = b.proc.Signal(syscall.SIGKILL)
		b.proc.Wait(10 * time.Second)
		return errors.New("kfake did not stop within 30s of SIGTERM")
	}
	select {
	case <-ctx.Done():
	case <-time.After(down):
	}
	return b.heal(context.WithoutCancel(ctx))
}

// heal starts kfake if it is not running.
func (b *kafkaBroker) heal(ctx context.Context) error {
	if b.proc.Running() {
		return nil
	}
	return b.start(ctx)
}

func (b *kafkaBroker) publishPaid(ctx context.Context, msgID string, body []byte) error {
	b.mu.Lock()
	if b.cl == nil {
		cc, err := ferrykafka.ParseURL(b.proxied)
		if err == nil {
			b.cl, err = kgo.NewClient(cc.Opts()...)
		}
		if err != nil {
			b.mu.Unlock()
			return err
		}
	}
	cl := b.cl
	b.mu.Unlock()
	var p shop.PaidPayload
	_ = json.Unmarshal(body, &p)
	// As a ferry relay writes it: the aggregate (the order) as the key,
	// the event id and type in ferry's headers.
	rec := &kgo.Record{Topic: shop.RoutePaid, Key: []byte(strconv.FormatInt(p.OrderID, 10)), Value: body,
		Headers: []kgo.RecordHeader{{Key: ferrybroker.HeaderEventID, Value: []byte(msgID)},
			{Key: ferrybroker.HeaderEventType, Value: []byte(shop.OrderPaid)}}}
	return cl.ProduceSync(ctx, rec).FirstErr()
}

func (b *kafkaBroker) close() {
	b.mu.Lock()
	if b.cl != nil {
		b.cl.Close()
	}
	b.mu.Unlock()
	if b.proc != nil && b.proc.Running() {
		if b.proc.Stop(15*time.Second) == nil {
			_ = b.proc.Signal(syscall.SIGKILL)
			b.proc.Wait(5 * time.Second)
		}
	}
	_ = os.RemoveAll(b.data)
}

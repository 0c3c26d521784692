package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/examples/shop"
)

// broker is the message broker of a run, as the harness sees it.
type broker interface {
	// url is the address the processes use (through the proxy).
	url() string
	// relayArgs are the relay's broker flags.
	relayArgs() []string
	// quiet reports whether both consumer groups have nothing pending.
	// Unless final, a broker may answer from a cheaper check that sees
	// only part of what is pending (RabbitMQ: the messages no consumer
	// holds); settle asks for the final answer once the cheap one held.
	quiet(ctx context.Context, final bool) (bool, error)
	// pending says what is left when quiet is false, as far as the
	// broker tells.
	pending(ctx context.Context) string
	// parked reads the messages each consumer group parked.
	parked(ctx context.Context) (map[string][]parkedMsg, error)
	// restart stops and starts the broker (where the harness may).
	restart(ctx context.Context, down time.Duration) error
	// heal undoes whatever fault the broker is in.
	heal(ctx context.Context) error
	// publishPaid publishes an OrderPaid event with the given message id,
	// directly (the duplicate storm).
	publishPaid(ctx context.Context, msgID string, body []byte) error
	close()
}

type natsBroker struct {
	direct, proxied string
	nc              *nats.Conn
	js              jetstream.JetStream
	server          *shop.Proc  // the run's own server; nil: the shared one
	store           string      // its JetStream store
	nodes           []*natsNode // the run's own cluster (Options.Cluster)
	release         func()      // lets the next run have the shared server
}

// sharedNATS is held by the run that uses the shared NATS server: the
// shop's stream and subjects are fixed names, and JetStream refuses two
// streams that bind the same subjects.
var sharedNATS sync.Mutex

// newNATSBroker starts a NATS server with JetStream of the run's own from
// o.NATSServer, or, when that is empty, takes the shared server at
// o.NATSURL for the run (one run at a time).
func newNATSBroker(ctx context.Context, o Options, px *proxies) (_ *natsBroker, err error) {
	b := &natsBroker{}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	direct, replicas := o.NATSURL, 1
	switch {
	case o.Cluster && o.NATSServer == "":
		return nil, errors.New("a NATS cluster needs a nats-server binary (Options.NATSServer)")
	case o.Cluster:
		if direct, err = b.startCluster(ctx, o); err != nil {
			return nil, err
		}
		replicas = len(b.nodes)
	case o.NATSServer != "":
		if direct, err = b.startServer(ctx, o); err != nil {
			return nil, err
		}
	default:
		sharedNATS.Lock()
		b.release = sharedNATS.Unlock
	}
	var proxied []string
	for _, one := range strings.Split(direct, ",") {
		u, err := url.Parse(one)
		if err != nil {
			return nil, err
		}
		addr, err := px.add("broker", u.Host)
		if err != nil {
			return nil, err
		}
		proxied = append(proxied, "nats://"+addr)
	}
	b.direct, b.proxied = direct, strings.Join(proxied, ",")
	if b.nc, err = nats.Connect(direct); err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	if b.js, err = jetstream.New(b.nc); err != nil {
		return nil, err
	}
	// A fresh stream: the shop's names are fixed. A server of the run's
	// own has none yet.
	if b.server == nil && b.nodes == nil {
		if err := b.js.DeleteStream(ctx, shop.Stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, err
		}
	}
	// A cluster just started may drop a JetStream API request while its
	// servers agree on a meta leader: each attempt has a timeout of its
	// own, and the setup is tried again for up to a minute.
	deadline := time.Now().Add(time.Minute)
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = shop.SetupNATSReplicas(actx, direct, replicas)
		cancel()
		if err == nil {
			break
		}
		if len(b.nodes) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("declare the shop's stream: %w", err)
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
	return b, nil
}

// startServer runs o.NATSServer with JetStream on a free loopback port and
// a store in o.Dir, and returns its URL once it accepts connections.
func (b *natsBroker) startServer(ctx context.Context, o Options) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	b.store = filepath.Join(o.Dir, "nats")
	b.server = &shop.Proc{Name: "nats", Bin: o.NATSServer, Log: o.Log,
		Args: []string{"-a", "127.0.0.1", "-p", port, "-js", "-sd", b.store}}
	if err := b.server.Start(); err != nil {
		return "", err
	}
	addr := "127.0.0.1:" + port
	if err := waitListening(ctx, b.server, addr); err != nil {
		return "", err
	}
	return "nats://" + addr, nil
}

func (b *natsBroker) url() string         { return b.proxied }
func (b *natsBroker) relayArgs() []string { return []string{"--stream", shop.Stream} }

func (b *natsBroker) quiet(ctx context.Context, _ bool) (bool, error) {
	q, _, err := shop.NATSQuiet(ctx, b.direct)
	return q, err
}

func (b *natsBroker) pending(ctx context.Context) string {
	var parts []string
	for _, group := range []string{"points", "sms"} {
		c, err := b.js.Consumer(ctx, shop.Stream, group)
		if err != nil {
			parts = append(parts, group+": "+err.Error())
			continue
		}
		info, err := c.Info(ctx)
		if err != nil {
			parts = append(parts, group+": "+err.Error())
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d pending, %d unacknowledged (%d redelivered)",
			group, info.NumPending, info.NumAckPending, info.NumRedelivered))
	}
	return strings.Join(parts, "; ")
}

func (b *natsBroker) parked(ctx context.Context) (map[string][]parkedMsg, error) {
	out := map[string][]parkedMsg{}
	stream, err := b.js.Stream(ctx, shop.Stream)
	if err != nil {
		return nil, err
	}
	for _, group := range []string{"points", "sms"} {
		subject := shop.ParkSubject(group)
		// How many the stream holds on the subject, read first: a fetch
		// that comes back empty is no proof of the end (on a cluster
		// whose leader just moved, the first fetches may).
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil {
			return nil, err
		}
		want := int(info.State.Subjects[subject])
		cons, err := b.js.OrderedConsumer(ctx, shop.Stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{subject}})
		if err != nil {
			return nil, err
		}
		deadline := time.Now().Add(time.Minute)
		for len(out[group]) < want {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("read %d of the %d messages on %s within a minute", len(out[group]), want, subject)
			}
			batch, err := cons.Fetch(500, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				return nil, err
			}
			for m := range batch.Messages() {
				out[group] = append(out[group], parkedMsg{ID: m.Headers().Get("Ferry-Event-Id"), Body: m.Data()})
			}
		}
	}
	return out, nil
}

// parkedMsg is a message a consumer parked.
type parkedMsg struct {
	ID   string // the event id
	Body []byte
}

func (b *natsBroker) restart(context.Context, time.Duration) error {
	return errors.New("the harness does not restart NATS")
}

func (b *natsBroker) heal(context.Context) error { return nil }

func (b *natsBroker) publishPaid(ctx context.Context, msgID string, body []byte) error {
	msg := nats.NewMsg(shop.RoutePaid)
	msg.Data = body
	msg.Header.Set("Ferry-Event-Type", shop.OrderPaid)
	_, err := b.js.PublishMsg(ctx, msg, jetstream.WithMsgID(msgID))
	return err
}

func (b *natsBroker) close() {
	if b.js != nil && b.server == nil && b.nodes == nil {
		_ = b.js.DeleteStream(context.Background(), shop.Stream)
	}
	if b.nc != nil {
		b.nc.Close()
	}
	servers := []*shop.Proc{b.server}
	for _, n := range b.nodes {
		servers = append(servers, n.proc)
	}
	for _, srv := range servers {
		if srv != nil && srv.Running() {
			if srv.Stop(15*time.Second) == nil {
				_ = srv.Signal(syscall.SIGKILL)
				srv.Wait(5 * time.Second)
			}
		}
	}
	if b.store != "" {
		_ = os.RemoveAll(b.store)
	}
	if b.release != nil {
		b.release()
	}
}

// EnvNATSServer names the nats-server binary the harness runs for each
// NATS run; default: nats-server on the PATH, or Debian's
// /usr/sbin/nats-server.
const EnvNATSServer = "FERRY_TEST_NATS_SERVER"

// NATSServer returns the nats-server binary to run (see EnvNATSServer),
// or "" when there is none: the runs then take the shared server at
// Options.NATSURL one at a time.
func NATSServer() string {
	if p := os.Getenv(EnvNATSServer); p != "" {
		return p
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nats-server"); err == nil {
		return "/usr/sbin/nats-server"
	}
	return ""
}

package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
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
}

func newNATSBroker(ctx context.Context, direct string, px *proxies) (*natsBroker, error) {
	u, err := url.Parse(direct)
	if err != nil {
		return nil, err
	}
	addr, err := px.add("broker", u.Host)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(direct)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	// A fresh stream: the shop's names are fixed.
	if err := js.DeleteStream(ctx, shop.Stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		nc.Close()
		return nil, err
	}
	if err := shop.SetupNATS(ctx, direct); err != nil {
		nc.Close()
		return nil, err
	}
	return &natsBroker{direct: direct, proxied: "nats://" + addr, nc: nc, js: js}, nil
}

func (b *natsBroker) url() string         { return b.proxied }
func (b *natsBroker) relayArgs() []string { return []string{"--stream", shop.Stream} }

func (b *natsBroker) quiet(ctx context.Context, _ bool) (bool, error) {
	q, _, err := shop.NATSQuiet(ctx, b.direct)
	return q, err
}

func (b *natsBroker) parked(ctx context.Context) (map[string][]parkedMsg, error) {
	out := map[string][]parkedMsg{}
	for _, group := range []string{"points", "sms"} {
		cons, err := b.js.OrderedConsumer(ctx, shop.Stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{shop.ParkSubject(group)}})
		if err != nil {
			return nil, err
		}
		for {
			batch, err := cons.Fetch(500, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				return nil, err
			}
			n := 0
			for m := range batch.Messages() {
				n++
				out[group] = append(out[group], parkedMsg{ID: m.Headers().Get("Ferry-Event-Id"), Body: m.Data()})
			}
			if n == 0 {
				break
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
	return errors.New("the harness does not restart the shared NATS server")
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
	_ = b.js.DeleteStream(context.Background(), shop.Stream)
	b.nc.Close()
}

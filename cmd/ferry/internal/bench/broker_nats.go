package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrytype"
)

// natsDest is a bench's destination on NATS: a JetStream stream on file
// storage taking the bench's subjects.
type natsDest struct {
	url     string
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  string
	subject string
}

func openNATS(ctx context.Context, rawURL, name string) (*natsDest, error) {
	nc, err := nats.Connect(rawURL, nats.Name("ferry-bench"))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %s", ferrytype.RedactURL(rawURL), ferrytype.RedactURL(err.Error()))
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		nc.Close()
		return nil, err
	}
	d := &natsDest{url: rawURL, nc: nc, js: js, stream: strings.ToUpper(strings.ReplaceAll(name, "-", "_")),
		subject: "ferrybench." + name + ".paid"}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: d.stream, Subjects: []string{"ferrybench." + name + ".>"},
		Storage: jetstream.FileStorage}); err != nil {
		d.close()
		return nil, fmt.Errorf("create stream %s: %w", d.stream, err)
	}
	return d, nil
}

func (d *natsDest) publisher(ctx context.Context) (ferrybroker.Publisher, error) {
	p, err := ferrynats.Dial(ctx, d.url, &ferrynats.DialConfig{Config: ferrynats.Config{Stream: d.stream}})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (d *natsDest) purge(ctx context.Context) error {
	s, err := d.js.Stream(ctx, d.stream)
	if err != nil {
		return err
	}
	return s.Purge(ctx)
}

func (d *natsDest) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = d.js.DeleteStream(ctx, d.stream)
	d.nc.Close()
}

// raw publishes asynchronously to JetStream with at most window awaiting
// their acks.
func (d *natsDest) raw(ctx context.Context, n, window int) (time.Duration, error) {
	js, err := jetstream.New(d.nc, jetstream.WithPublishAsyncMaxPending(window))
	if err != nil {
		return 0, err
	}
	futures := make([]jetstream.PubAckFuture, 0, n)
	start := time.Now()
	for i := 0; i < n; i++ {
		f, err := js.PublishAsync(d.subject, Payload, jetstream.WithMsgID(fmt.Sprintf("raw-%d-%d", start.UnixNano(), i)))
		if err != nil {
			return 0, err
		}
		futures = append(futures, f)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	took := time.Since(start)
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return 0, fmt.Errorf("raw publish: %w", err)
		}
	}
	return took, nil
}

func (d *natsDest) count(ctx context.Context) (int, error) {
	s, err := d.js.Stream(ctx, d.stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.State.Msgs), nil
}

// consume runs an ordered consumer of new messages on the stream.
func (d *natsDest) consume(ctx context.Context, fn func(id string, at time.Time)) (func(), error) {
	c, err := d.js.OrderedConsumer(ctx, d.stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return nil, err
	}
	cc, err := c.Consume(func(m jetstream.Msg) { fn(m.Headers().Get(jetstream.MsgIDHeader), time.Now()) })
	if err != nil {
		return nil, err
	}
	return cc.Stop, nil
}

// plain opens a connection of its own for asynchronous JetStream
// publishes.
func (d *natsDest) plain(context.Context) (func(context.Context, []plainRow) error, func(), error) {
	nc, err := nats.Connect(d.url, nats.Name("ferry-bench-plain"))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	publish := func(ctx context.Context, rows []plainRow) error {
		fs := make([]jetstream.PubAckFuture, len(rows))
		for i, r := range rows {
			f, err := js.PublishAsync(r.dest, []byte(r.payload), jetstream.WithMsgID(r.id))
			if err != nil {
				return err
			}
			fs[i] = f
		}
		for _, f := range fs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	return publish, nc.Close, nil
}

func (d *natsDest) relayArgs() []string { return []string{"--broker-url", d.url, "--stream", d.stream} }

func (d *natsDest) version() string {
	return "nats " + d.nc.ConnectedServerVersion() + ", JetStream file storage"
}

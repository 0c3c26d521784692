// Package ferrynats publishes outbox events to NATS JetStream.
//
// Each event becomes one JetStream message on the subject given by its
// destination (or its type), with Nats-Msg-Id set to the event id, so the
// stream drops a republished event inside its duplicate window and reports
// it as a duplicate. Outcomes map as follows: a PubAck is confirmed; "no
// responders" (no stream listens on the subject) is returned, i.e.
// unroutable, with an error naming the subject; a JetStream API error is
// rejected; a timeout, a disconnect or the end of the context is unknown.
// An unknown outcome whose message never left the process is also
// ferrytype.ErrNotSent: the connection was down or reconnecting when the
// publish began (the publisher does not write into nats.go's reconnect
// buffer, which would send it later), the connection was closed or its
// buffer full, or the context ended before the publish. The relay gives
// such events back without spending an attempt, and stops claiming while
// Connected is false.
package ferrynats

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrytype"
)

// Config configures a Publisher. A nil config uses the defaults.
type Config struct {
	// Stream names the JetStream stream the events go to. With Declare the
	// publisher creates it (or updates it to Subjects) at start; without,
	// it checks at start that the stream exists and lists every subject
	// in Subjects. Empty: no check, any stream bound to the subject will
	// do, and a subject with none is reported as unroutable.
	Stream string
	// Subjects are the stream's subjects, wildcards allowed
	// ("orders.>"). Required with Declare.
	Subjects []string
	// Declare creates or updates Stream at start. Default false.
	Declare bool
	// Replicas of a declared stream. Default 1.
	Replicas int
	// DuplicateWindow of a declared stream: how long JetStream remembers
	// message ids to drop duplicates. Default 2m, JetStream's own default.
	// Events republished after the window are stored twice; consumers
	// must deduplicate anyway.
	DuplicateWindow time.Duration
	// MaxPending caps asynchronous publishes awaiting their acks. Default
	// 4096.
	MaxPending int
	// Encoding writes each event as a message in place of ferry's form
	// (ferrybroker.Encoding; ferrycloudevents.Encoding writes CloudEvents
	// in the NATS binding's ce- headers). Default nil: ferry's form. The
	// JetStream message id (Nats-Msg-Id) stays the event id either way.
	Encoding ferrybroker.Encoding
}

// Publisher publishes to JetStream. It implements ferrybroker.Publisher,
// and ferrybroker.DurabilityReader for the stream Config.Stream names.
type Publisher struct {
	js   jetstream.JetStream
	conn *nats.Conn // the connection js publishes on
	nc   *nats.Conn // set when the publisher owns the connection
	enc  ferrybroker.Encoding
	// stream is Config.Stream: the stream Durability reads, "" for none.
	stream string
}

var (
	_ ferrybroker.Publisher        = (*Publisher)(nil)
	_ ferrybroker.Checker          = (*Publisher)(nil)
	_ ferrybroker.Connectivity     = (*Publisher)(nil)
	_ ferrybroker.DurabilityReader = (*Publisher)(nil)
)

// New returns a publisher on nc, declaring or verifying the stream as cfg
// says. The publisher never closes nc.
func New(ctx context.Context, nc *nats.Conn, cfg *Config) (*Publisher, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: ferrynats.New: connection is nil", ferrytype.ErrInvalidConfig)
	}
	if cfg == nil {
		cfg = &Config{}
	}
	maxPending := cfg.MaxPending
	if maxPending == 0 {
		maxPending = 4096
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxPending))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if err := setupStream(ctx, js, cfg); err != nil {
		return nil, err
	}
	return &Publisher{js: js, conn: nc, enc: cfg.Encoding, stream: cfg.Stream}, nil
}

// DialConfig configures Dial.
type DialConfig struct {
	Config
	// TLS, when set, is used for the connection (a tls:// URL turns TLS on
	// with the system roots).
	TLS *tls.Config
	// Options are further nats.go options, applied last.
	Options []nats.Option
	// Logger receives the connection's moves: one line when it is lost,
	// one when it is back, naming the server (of a cluster's list) it
	// reconnected to. Default: slog.Default().
	Logger *slog.Logger
}

// String returns the address of the NATS server the publisher's
// connection is connected to, without credentials, or, while it is not
// connected, the first server it knows. A relay records it in its
// heartbeat row (ferry.HeartbeatConfig.Broker).
func (p *Publisher) String() string {
	if u := p.conn.ConnectedUrlRedacted(); u != "" {
		return ferrytype.RedactURL(u)
	}
	if s := p.conn.Servers(); len(s) > 0 {
		return ferrytype.RedactURL(s[0])
	}
	return "nats"
}

// Schemes returns the URL schemes Dial accepts: nats and tls.
func Schemes() []string { return []string{"nats", "tls"} }

// Dial connects to the NATS server at url (nats://user:password@host:4222,
// tls://host:4222, or a comma-separated list) and returns a publisher that
// closes the connection on Close. The connection reconnects forever;
// publishes during an outage end as unknown outcomes that were not sent
// (ferrytype.ErrNotSent), which the relay gives back without spending an
// attempt.
// Errors never contain the password.
func Dial(ctx context.Context, url string, cfg *DialConfig) (*Publisher, error) {
	if cfg == nil {
		cfg = &DialConfig{}
	}
	opts := []nats.Option{
		nats.Name("ferry-relay"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.Timeout(5 * time.Second),
	}
	if cfg.TLS != nil {
		opts = append(opts, nats.Secure(cfg.TLS))
	}
	opts = append(opts, connectionLog(cfg.Logger)...)
	opts = append(opts, cfg.Options...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, ferrytype.RedactError(fmt.Errorf("connect to %s: %w", ferrytype.RedactURL(url), err), url)
	}
	p, err := New(ctx, nc, &cfg.Config)
	if err != nil {
		nc.Close()
		return nil, err
	}
	p.nc = nc
	return p, nil
}

// checkJetStream refuses, at start, a server on which no publish could be
// confirmed: one without JetStream. Which stream captures each event's
// subject shows at its publish (unroutable, logged, and DEAD past the
// retry policy's attempts): streams come and go with other deployments,
// so that cannot be settled at start without a Stream to check.
func checkJetStream(ctx context.Context, js jetstream.JetStream) error {
	_, err := js.AccountInfo(ctx)
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return fmt.Errorf("%w: ferrynats: JetStream is not enabled on this server, so no publish can be confirmed: "+
			"start nats-server with JetStream (-js), or enable it for the account: %w", ferrytype.ErrInvalidConfig, err)
	}
	// Any other error (a user not allowed $JS.API.INFO, a slow server)
	// says nothing about JetStream: each publish will tell.
	return nil
}

// refusedStreamConfig are the JetStream API errors with which a server
// refuses a stream's configuration for good: replicas on a server that is
// not clustered (10074), an invalid configuration (10052), subjects that
// overlap another stream's (10065), a name in use with another
// configuration (10058).
var refusedStreamConfig = []jetstream.ErrorCode{10074, 10052, 10065, jetstream.JSErrCodeStreamNameInUse}

func setupStream(ctx context.Context, js jetstream.JetStream, cfg *Config) error {
	if cfg.Stream == "" {
		if cfg.Declare {
			return fmt.Errorf("%w: ferrynats: Declare needs a Stream name", ferrytype.ErrInvalidConfig)
		}
		return checkJetStream(ctx, js)
	}
	if cfg.Declare {
		if len(cfg.Subjects) == 0 {
			return fmt.Errorf("%w: ferrynats: declaring stream %s needs Subjects", ferrytype.ErrInvalidConfig, cfg.Stream)
		}
		sc := jetstream.StreamConfig{
			Name:       cfg.Stream,
			Subjects:   cfg.Subjects,
			Storage:    jetstream.FileStorage,
			Replicas:   max(cfg.Replicas, 1),
			Duplicates: cfg.DuplicateWindow,
		}
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && slices.Contains(refusedStreamConfig, apiErr.ErrorCode) {
				// No retry mends it: the server refuses the stream as asked.
				return fmt.Errorf("%w: declare stream %s: %w", ferrytype.ErrInvalidConfig, cfg.Stream, err)
			}
			return fmt.Errorf("declare stream %s: %w", cfg.Stream, err)
		}
		return nil
	}
	st, err := js.Stream(ctx, cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("stream %s does not exist: create it, or let the relay declare it (--declare): %w", cfg.Stream, err)
	}
	if err != nil {
		return fmt.Errorf("verify stream %s: %w", cfg.Stream, err)
	}
	have := st.CachedInfo().Config.Subjects
	for _, s := range cfg.Subjects {
		if !slices.Contains(have, s) {
			return fmt.Errorf("stream %s does not list subject %q (it has %v)", cfg.Stream, s, have)
		}
	}
	return nil
}

// Publish publishes msgs asynchronously, then waits for each PubAck.
// While the connection is not up it publishes nothing: every message is
// not sent (ferrytype.ErrNotSent). Before it waits, it reaches the fault
// point ferryfault.PublishBeforeConfirm of ctx: an error there makes every
// message published an unknown outcome, as a crash there would.
func (p *Publisher) Publish(ctx context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	if err := p.Disconnected(); err != nil {
		return ferrybroker.AllNotSent(len(msgs), fmt.Errorf("not sent: %w", err))
	}
	res := make([]ferrytype.PublishResult, len(msgs))
	futs := make([]jetstream.PubAckFuture, len(msgs))
	for i := range msgs {
		if err := ctx.Err(); err != nil {
			res[i] = ferrytype.NotSent(fmt.Errorf("not sent: %w", err))
			continue
		}
		m, err := natsMsg(&msgs[i], p.enc)
		if err != nil {
			res[i] = ferrytype.Rejected(fmt.Errorf("not sent: %w", err))
			continue
		}
		f, err := p.js.PublishMsgAsync(m, jetstream.WithMsgID(msgs[i].ID))
		if err != nil {
			res[i] = classify(err, m.Subject)
			continue
		}
		futs[i] = f
	}
	if err := ferryfault.At(ctx, ferryfault.PublishBeforeConfirm); err != nil {
		for i, f := range futs {
			if f != nil {
				res[i] = ferrytype.Unknown(fmt.Errorf("fault before confirm: %w", err))
			}
		}
		return res
	}
	for i, f := range futs {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			res[i] = ferrytype.PublishResult{Outcome: ferrytype.OutcomeConfirmed, Duplicate: ack.Duplicate}
		case err := <-f.Err():
			res[i] = classify(err, f.Msg().Subject)
		case <-ctx.Done():
			res[i] = ferrytype.Unknown(fmt.Errorf("waiting for the PubAck: %w", ctx.Err()))
		}
	}
	return res
}

// natsMsg builds the message of m: with enc nil, the event's headers
// overlaid with ferry's metadata headers and the payload; else the
// headers and body enc writes.
func natsMsg(m *ferrytype.Message, enc ferrybroker.Encoding) (*nats.Msg, error) {
	if enc != nil {
		e, err := enc.Encode(m, ferrybroker.ProtocolNATS)
		if err != nil {
			return nil, err
		}
		h := make(nats.Header, len(e.Headers))
		for _, kv := range e.Headers {
			h.Set(kv[0], kv[1])
		}
		return &nats.Msg{Subject: m.Route(), Data: e.Body, Header: h}, nil
	}
	h := make(nats.Header, len(m.Headers)+6)
	for k, v := range m.Headers {
		h.Set(k, v)
	}
	for _, kv := range ferrybroker.MetadataHeaders(m) {
		h.Set(kv[0], kv[1])
	}
	return &nats.Msg{Subject: m.Route(), Data: m.Payload, Header: h}, nil
}

// classify maps the publish error of a message to subject to an outcome.
// Only errors that prove the stream did not store the message are returned
// or rejected; everything else is unknown, and not sent when the client
// refused the message before writing it.
func classify(err error, subject string) ferrytype.PublishResult {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return ferrytype.Returned(fmt.Errorf("unroutable: no JetStream stream is bound to subject %q "+
			"(create one that captures it, e.g. ferry relay --stream NAME --subjects %q --declare, or fix the event's Destination): %w",
			subject, subject, err))
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, jetstream.ErrTooManyStalledMsgs):
		// Refused by the client before anything was written.
		return ferrytype.NotSent(fmt.Errorf("not sent: %w", err))
	case errors.As(err, &apiErr):
		return ferrytype.Rejected(err)
	case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject):
		// Refused by the client before anything was sent.
		return ferrytype.Rejected(err)
	}
	return ferrytype.Unknown(err)
}

// Check reports whether the connection is up and JetStream answers.
func (p *Publisher) Check(ctx context.Context) error {
	if _, err := p.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	return nil
}

// Connected reports whether the connection to NATS is up (see
// ferrybroker.Connectivity): false while it is reconnecting, draining or
// closed. It makes no round trip.
func (p *Publisher) Connected() bool { return p.conn.IsConnected() }

// Disconnected says why the publisher cannot publish now, nil when
// Connected is true: the connection's status and its last error.
func (p *Publisher) Disconnected() error {
	if p.conn.IsConnected() {
		return nil
	}
	if err := p.conn.LastError(); err != nil {
		return fmt.Errorf("not connected to NATS (%s): %s", p.conn.Status(), ferrytype.RedactURL(err.Error()))
	}
	return fmt.Errorf("not connected to NATS (%s)", p.conn.Status())
}

// JetStream returns the publisher's JetStream context.
func (p *Publisher) JetStream() jetstream.JetStream { return p.js }

// Close waits briefly for outstanding acks and closes the connection if the
// publisher opened it.
func (p *Publisher) Close() error {
	if p.nc != nil {
		p.nc.Close()
	}
	return nil
}

// connectionLog returns the options that log a connection's moves between
// servers: the server lost, and the one reconnected to (on a cluster, as
// often another one as the same).
func connectionLog(log *slog.Logger) []nats.Option {
	if log == nil {
		log = slog.Default()
	}
	var last string // the server last connected to, redacted
	return []nats.Option{
		nats.ConnectHandler(func(nc *nats.Conn) { last = ferrytype.RedactURL(nc.ConnectedUrlRedacted()) }),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err == nil {
				return // Close
			}
			log.Warn("lost the connection to the NATS server; reconnecting", "server", last,
				"err", ferrytype.RedactURL(err.Error()))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			now := ferrytype.RedactURL(nc.ConnectedUrlRedacted())
			if now != last {
				log.Warn("connected to another NATS server", "from", last, "to", now)
			} else {
				log.Info("connected to the NATS server again", "server", now)
			}
			last = now
		}),
	}
}

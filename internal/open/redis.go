package open

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/redis/go-redis/v9"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/ferrywatermill"
	"github.com/ferrydev/ferry/internal/tlsfiles"
)

// RedisSchemes are the URL schemes of Redis Streams, which ferry relay
// reaches through Watermill's redisstream publisher (ferrywatermill).
func RedisSchemes() []string { return []string{"redis", "rediss"} }

// The TLS options a redis:// URL may carry besides go-redis's own.
const (
	redisTLSCA   = "tls_ca"
	redisTLSCert = "tls_cert"
	redisTLSKey  = "tls_key"
)

// parseRedis returns the client options of a Redis URL: go-redis's form
// (redis://[user:password@]host:6379[/db][?dial_timeout=3s&...], rediss://
// for TLS), and tls_ca, tls_cert and tls_key, PEM files of the CA that
// signs the server's certificate and of the client's certificate and key
// (rediss:// only). The client never sends a failed command again: the
// relay decides what is published again, and a command that failed to dial
// was never sent.
func parseRedis(rawURL string) (*redis.Options, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: redis URL: %v", ferrytype.ErrInvalidConfig, err)
	}
	q := u.Query()
	ca, cert, key := q.Get(redisTLSCA), q.Get(redisTLSCert), q.Get(redisTLSKey)
	q.Del(redisTLSCA)
	q.Del(redisTLSCert)
	q.Del(redisTLSKey)
	u.RawQuery = q.Encode()
	opt, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("%w: redis URL: %v", ferrytype.ErrInvalidConfig, err)
	}
	if ca != "" || cert != "" || key != "" {
		if opt.TLSConfig == nil {
			return nil, fmt.Errorf("%w: redis URL: tls_ca, tls_cert and tls_key need rediss://", ferrytype.ErrInvalidConfig)
		}
		if err := tlsfiles.Apply(opt.TLSConfig, ca, cert, key, tlsfiles.Names{CA: redisTLSCA, Cert: redisTLSCert, Key: redisTLSKey}); err != nil {
			return nil, fmt.Errorf("%w: redis URL: %v", ferrytype.ErrInvalidConfig, err)
		}
	}
	if opt.TLSConfig != nil && opt.TLSConfig.MinVersion < tls.VersionTLS12 {
		opt.TLSConfig.MinVersion = tls.VersionTLS12
	}
	opt.MaxRetries = -1
	return opt, nil
}

func checkRedis(rawURL string) error {
	_, err := parseRedis(rawURL)
	return err
}

// redisPublisher is the relay's Redis Streams publisher: Watermill's
// redisstream publisher behind ferrywatermill, with a probe that pings
// Redis twice a second, so that the relay stops claiming while Redis is
// unreachable.
type redisPublisher struct {
	*ferrywatermill.Publisher
	rdb  *redis.Client
	stop context.CancelFunc
	done chan struct{}
}

// dialRedis connects to Redis at rawURL (one ping, bounded by ctx) and
// returns a publisher to its streams: an event's destination is the
// stream. XADD answered is a confirmation (ferrywatermill.Stored), as
// durable as the server's persistence (appendonly yes, appendfsync
// always for no loss on a crash of Redis).
func dialRedis(ctx context.Context, rawURL string) (ferrybroker.Publisher, error) {
	opt, err := parseRedis(rawURL)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis at %s: %w", ferrytype.RedactURL(rawURL), err)
	}
	wpub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb}, watermill.NopLogger{})
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	var down atomic.Pointer[error]
	p, err := ferrywatermill.NewPublisher(wpub, &ferrywatermill.PublisherConfig{
		Guarantee: ferrywatermill.Stored,
		Connected: func() error {
			if e := down.Load(); e != nil {
				return *e
			}
			return nil
		},
		NotSent: dialFailed,
	})
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	pctx, stop := context.WithCancel(context.Background())
	rp := &redisPublisher{Publisher: p, rdb: rdb, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(rp.done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
			c, cancel := context.WithTimeout(pctx, time.Second)
			err := rdb.Ping(c).Err()
			cancel()
			if err != nil && pctx.Err() == nil {
				err = fmt.Errorf("redis unreachable: %w", err)
				down.Store(&err)
			} else {
				down.Store(nil)
			}
		}
	}()
	return rp, nil
}

// dialFailed reports an error of a connection that was never made: with
// the client's retries off, the command was never sent.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Close stops the probe, waits for the publishes in flight and closes the
// client.
func (p *redisPublisher) Close() error {
	p.stop()
	<-p.done
	err := p.Publisher.Close()
	return errors.Join(err, p.rdb.Close())
}

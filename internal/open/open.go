// Package open turns the CLI's --database-url and --broker-url into a store
// and a publisher. The URL's scheme picks the adapter.
package open

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
)

func scheme(raw string) string {
	s, _, ok := strings.Cut(raw, ":")
	if !ok {
		return ""
	}
	return strings.ToLower(s)
}

// Store opens the outbox table named table (default when empty) in the
// database at rawURL: mysql://, postgres:// (or postgresql://), sqlite:.
func Store(ctx context.Context, rawURL, table string) (ferrystore.Store, error) {
	switch scheme(rawURL) {
	case "mysql", "mariadb":
		return ferrymysql.Open(ctx, rawURL, &ferrymysql.Config{Table: table})
	case "postgres", "postgresql":
		return ferrypg.Open(ctx, rawURL, &ferrypg.Config{Table: table})
	case "sqlite":
		return ferrysqlite.Open(ctx, rawURL, &ferrysqlite.Config{Table: table})
	case "":
		return nil, fmt.Errorf("%w: no database URL: set --database-url or FERRY_DATABASE_URL "+
			"(mysql://user:pass@host:3306/db, postgres://user:pass@host:5432/db, sqlite:///path/file.db)", ferrytype.ErrInvalidConfig)
	}
	return nil, fmt.Errorf("%w: database URL %s: unknown scheme %q (want mysql, postgres or sqlite)",
		ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL), scheme(rawURL))
}

// NATSConfig is the stream topology of a NATS publisher.
type NATSConfig = ferrynats.Config

// Publisher connects to the broker at rawURL: nats:// or tls://.
func Publisher(ctx context.Context, rawURL string, natsCfg *NATSConfig) (ferrybroker.Publisher, error) {
	switch scheme(rawURL) {
	case "nats", "tls":
		var dc ferrynats.DialConfig
		if natsCfg != nil {
			dc.Config = *natsCfg
		}
		return ferrynats.Dial(ctx, rawURL, &dc)
	case "":
		return nil, fmt.Errorf("%w: no broker URL: set --broker-url or FERRY_BROKER_URL (nats://host:4222)", ferrytype.ErrInvalidConfig)
	}
	if _, err := url.Parse(rawURL); err != nil {
		return nil, fmt.Errorf("%w: broker URL %s: cannot parse", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL))
	}
	return nil, fmt.Errorf("%w: broker URL %s: unknown scheme %q (want nats)", ferrytype.ErrInvalidConfig,
		ferrytype.RedactURL(rawURL), scheme(rawURL))
}

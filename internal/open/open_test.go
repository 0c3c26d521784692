package open_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
	"github.com/ferrydev/ferry/internal/testsvc"
)

func TestEachSchemeOpensItsStore(t *testing.T) {
	ctx := testsvc.Context(t, time.Minute)
	sqliteURL := "sqlite://" + filepath.Join(t.TempDir(), "f.db")
	for _, c := range []struct{ url, dialect string }{
		{sqliteURL, "sqlite"},
		{testsvc.URL(testsvc.EnvMySQL), "mysql"},
		{testsvc.URL(testsvc.EnvPostgres), "postgres"},
	} {
		t.Run(c.dialect, func(t *testing.T) {
			// Skip, or fail under FERRY_REQUIRE_SERVICES, when the server
			// is absent.
			switch c.dialect {
			case "mysql":
				testsvc.MySQL(t)
			case "postgres":
				testsvc.Postgres(t)
			}
			s, err := open.Store(ctx, c.url, testsvc.Name("ot_"))
			require.NoError(t, err)
			require.Equal(t, c.dialect, s.Dialect())
			require.NoError(t, s.Close())
			in, err := open.InboxStore(ctx, c.url, nil)
			require.NoError(t, err)
			require.Equal(t, c.dialect, in.Dialect())
			require.NoError(t, in.Close())
		})
	}
}

func TestUnknownSchemeIsInvalidConfig(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"", "oracle://x/y", "nats://127.0.0.1:4222"} {
		_, err := open.Store(ctx, u, "")
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, u)
		_, err = open.InboxStore(ctx, u, nil)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, u)
	}
}

func TestInvalidTableIsRefusedBeforeConnecting(t *testing.T) {
	_, err := open.Store(context.Background(), "mysql://nobody@127.0.0.1:1/none", "bad-name")
	require.ErrorIs(t, err, ferrytype.ErrInvalidIdentifier)
}

func TestEachSchemeDialsItsBroker(t *testing.T) {
	ctx := testsvc.Context(t, time.Minute)
	for _, c := range []struct{ url, system string }{
		{testsvc.URL(testsvc.EnvNATS), "nats"},
		{testsvc.URL(testsvc.EnvAMQP), "rabbitmq"},
	} {
		t.Run(c.system, func(t *testing.T) {
			require.Equal(t, c.system, open.BrokerSystem(c.url))
			// Skip, or fail under FERRY_REQUIRE_SERVICES, when the server
			// is absent.
			if c.system == "nats" {
				testsvc.NATS(t)
			} else {
				testsvc.UseRabbitMQ(t)
				testsvc.RabbitMQ(t)
			}
			p, err := open.Publisher(ctx, c.url, nil)
			require.NoError(t, err)
			require.NoError(t, p.Close())
		})
	}
	require.True(t, open.IsAMQP("AMQPS://h:5671/"), "schemes are case-insensitive")
	require.False(t, open.IsAMQP("nats://h:4222"))
}

func TestUnknownBrokerSchemeIsInvalidConfig(t *testing.T) {
	for _, u := range []string{"", "kafka://app:s3cr3t@broker:9092", "mysql://root@127.0.0.1/test"} {
		require.Empty(t, open.BrokerSystem(u), u)
		_, err := open.Publisher(context.Background(), u, nil)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, u)
		require.NotContains(t, err.Error(), "s3cr3t")
	}
}

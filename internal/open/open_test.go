package open_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
	"github.com/ferrydev/ferry/internal/testsvc"
)

func TestEachSchemeOpensItsStore(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	ctx := context.Background()
	for _, u := range []string{"", "oracle://x/y", "nats://127.0.0.1:4222"} {
		_, err := open.Store(ctx, u, "")
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, u)
		_, err = open.InboxStore(ctx, u, nil)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, u)
	}
}

func TestInvalidTableIsRefusedBeforeConnecting(t *testing.T) {
	t.Parallel()
	_, err := open.Store(context.Background(), "mysql://nobody@127.0.0.1:1/none", "bad-name")
	require.ErrorIs(t, err, ferrytype.ErrInvalidIdentifier)
}

func TestEachSchemeDialsItsBroker(t *testing.T) {
	t.Parallel()
	ctx := testsvc.Context(t, time.Minute)
	for _, c := range []struct {
		system string
		url    func(t *testing.T) string // skips, or fails under FERRY_REQUIRE_SERVICES, when the server is absent
	}{
		{"nats", func(t *testing.T) string { testsvc.NATS(t); return testsvc.URL(testsvc.EnvNATS) }},
		{"rabbitmq", func(t *testing.T) string {
			testsvc.RabbitMQ(t)
			return testsvc.URL(testsvc.EnvAMQP)
		}},
		{"kafka", func(t *testing.T) string { return "kafka://" + strings.Join(testsvc.Kafka(t), ",") }},
	} {
		t.Run(c.system, func(t *testing.T) {
			u := c.url(t)
			require.Equal(t, c.system, open.BrokerSystem(u))
			p, err := open.Publisher(ctx, u, nil)
			require.NoError(t, err)
			require.NoError(t, p.Close())
		})
	}
	require.True(t, open.IsAMQP("AMQPS://h:5671/"), "schemes are case-insensitive")
	require.False(t, open.IsAMQP("nats://h:4222"))
	require.True(t, open.IsKafka("KAFKAS://h:9093"))
	require.False(t, open.IsKafka("amqp://h:5672/"))
}

// A Kafka topic the publisher was told to check and that does not exist
// is a cause no retry mends; with Declare it is created.
func TestKafkaTopics(t *testing.T) {
	t.Parallel()
	ctx := testsvc.Context(t, time.Minute)
	u := "kafka://" + strings.Join(testsvc.Kafka(t), ",")
	missing := testsvc.Name("ferry_missing_")
	_, err := open.Publisher(ctx, u, &open.BrokerConfig{Kafka: open.KafkaConfig{Topics: []string{missing}}})
	require.Error(t, err)
	perr := open.Permanent(err)
	require.ErrorIs(t, perr, ferrytype.ErrInvalidConfig)
	require.ErrorContains(t, perr, "topic "+missing+" does not exist")

	p, err := open.Publisher(ctx, u, &open.BrokerConfig{Kafka: open.KafkaConfig{Topics: []string{missing}, Declare: true,
		Partitions: 3, ReplicationFactor: 1}})
	require.NoError(t, err)
	require.NoError(t, p.Close())
	p, err = open.Publisher(ctx, u, &open.BrokerConfig{Kafka: open.KafkaConfig{Topics: []string{missing}}})
	require.NoError(t, err, "the declared topic exists")
	require.NoError(t, p.Close())
}

func TestUnknownBrokerSchemeIsInvalidConfig(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "mqtt://app:s3cr3t@broker:1883", "mysql://root@127.0.0.1/test"} {
		require.Empty(t, open.BrokerSystem(u), u)
		_, err := open.Publisher(context.Background(), u, nil)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, u)
		require.NotContains(t, err.Error(), "s3cr3t")
	}
}

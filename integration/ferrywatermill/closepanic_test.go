package ferrywatermill_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/ferrywatermill"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// watermill-amqp v3.0.2 with a channel pool panics in Close when a pooled
// channel that the server closed could not be reopened: the pool keeps a
// nil channel and closes it. After a reconnect that happens by a race;
// here it is made certain: the connection has one channel id, the pooled
// channel's exchange declare fails (406: the exchange exists as direct,
// watermill-amqp declares it fanout) and the server closes it, another
// user takes the freed id, and the next publish cannot reopen the pooled
// channel. ferrywatermill's Close returns the panic as an error.
func TestPublisherCloseSurvivesWatermillAMQPsPoolPanic(t *testing.T) {
	t.Parallel()
	conn := testsvc.RabbitMQ(t)
	url := testsvc.URL(testsvc.EnvAMQP)
	topic := testsvc.Name("ferry-wm-close-")
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.ExchangeDeclare(topic, "direct", false, true, false, false, nil))
	defer ch.ExchangeDelete(topic, false, false)

	cfg := wamqp.NewDurablePubSubConfig(url, nil)
	cfg.Connection.AmqpConfig = &amqp.Config{ChannelMax: 1}
	cfg.Publish.ChannelPoolSize = 1
	cfg.Publish.ConfirmDelivery = true
	wpub, err := wamqp.NewPublisher(cfg, watermill.NopLogger{})
	require.NoError(t, err)
	p, err := ferrywatermill.NewPublisher(wpub, &ferrywatermill.PublisherConfig{Guarantee: ferrywatermill.Stored})
	require.NoError(t, err)
	ctx := testsvc.Context(t, time.Minute)
	msg := []ferrytype.Message{{ID: testsvc.Name("e-"), Type: "T", Destination: topic, Payload: []byte(`{}`)}}

	res := p.Publish(ctx, msg)
	require.NotEqual(t, ferrytype.OutcomeConfirmed, res[0].Outcome, "the pooled channel's declare is refused")
	var other *amqp.Channel
	require.Eventually(t, func() bool {
		other, err = wpub.Connection().Channel()
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "the server frees the closed channel's id")
	defer other.Close()
	res = p.Publish(ctx, msg)
	require.NotEqual(t, ferrytype.OutcomeConfirmed, res[0].Outcome)

	var closeErr error
	require.NotPanics(t, func() { closeErr = p.Close() })
	require.ErrorContains(t, closeErr, "the Watermill publisher panicked")
	require.Equal(t, closeErr, p.Close(), "a second Close says the same")
}

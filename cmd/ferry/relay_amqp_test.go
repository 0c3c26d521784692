package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// rabbitRelay is an outbox table on MariaDB with events for a fresh
// exchange, and the names of that exchange and of a fresh queue, all
// deleted when the test ends.
type rabbitRelay struct {
	st               testsvc.SQLStore
	exchange, queue  string
	routingKey, bind string
	ids              []string
}

func setupRabbitRelay(t *testing.T, total int) *rabbitRelay {
	t.Helper()
	testsvc.RabbitMQ(t)
	r := &rabbitRelay{st: testsvc.Store(t, "mysql"), exchange: testsvc.Name("ferry_ex_"), queue: testsvc.Name("ferry_q_")}
	r.routingKey = r.queue + ".paid"
	r.bind = r.queue + ".#"
	testsvc.DeleteRabbitMQExchange(t, r.exchange)
	testsvc.DeleteRabbitMQQueue(t, r.queue)
	testsvc.DeleteRabbitMQQueue(t, r.queue+".parking")
	ctx := testsvc.Context(t, time.Minute)
	ob, err := ferry.NewOutbox(r.st.Driver, nil)
	require.NoError(t, err)
	tx, err := r.st.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	events := make([]ferry.Event, total)
	for i := range events {
		events[i] = ferry.Event{AggregateType: "order", AggregateID: fmt.Sprint(i), Type: "OrderPaid",
			Payload: json.RawMessage(fmt.Sprintf(`{"orderId":%d}`, i)), Destination: r.routingKey}
	}
	r.ids, err = ob.EnqueueTx(ctx, tx, events...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	return r
}

func (r *rabbitRelay) args(extra ...string) []string {
	return append([]string{"relay", "--database-url", testsvc.URL(testsvc.EnvMySQL), "--table", r.st.Driver.Table(),
		"--broker-url", testsvc.URL(testsvc.EnvAMQP), "--exchange", r.exchange, "--queue", r.queue,
		"--poll-interval", "50ms"}, extra...)
}

// ferry relay declares the exchange, the quorum queue and its binding,
// publishes every event with confirms, and a later run verifies the same
// topology without --declare.
func TestRelayCLIToRabbitMQ(t *testing.T) {
	t.Parallel()
	r := setupRabbitRelay(t, 50)
	code, out, errOut := ferryCLI(t, r.args("--drain", "--declare", "--routing-key", r.bind)...)
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "50 published")
	got := testsvc.ReadRabbitMQQueue(t, testsvc.RabbitMQ(t), r.queue, 50, time.Minute)
	require.Len(t, got, 50)
	seen := map[string]bool{}
	for _, d := range got {
		seen[d.MessageId] = true
		require.Equal(t, r.exchange, d.Exchange)
		require.Equal(t, r.routingKey, d.RoutingKey)
	}
	for _, id := range r.ids {
		require.True(t, seen[id], "event %s", id)
	}

	code, out, errOut = ferryCLI(t, r.args("--drain")...)
	require.Equal(t, exitOK, code, "verify mode finds the declared topology: %s\n%s", out, errOut)
	require.Contains(t, out, "0 published")
}

func TestRelayCLIRabbitMQErrors(t *testing.T) {
	t.Parallel()
	testsvc.RabbitMQ(t) // skips when RabbitMQ is unreachable
	db := "sqlite:///" + t.TempDir() + "/x.db"
	code, _, errOut := ferryCLI(t, "migrate", "--database-url", db)
	require.Equal(t, exitOK, code, errOut)
	amqpURL := testsvc.URL(testsvc.EnvAMQP)
	for _, c := range []struct {
		name string
		code int
		args []string
		want string
	}{
		{"StreamWithAMQP", exitUsage, []string{"--broker-url", amqpURL, "--stream", "S"}, "--stream applies to NATS"},
		{"QueueWithNATS", exitUsage, []string{"--broker-url", "nats://127.0.0.1:4222", "--queue", "q"}, "--queue applies to RabbitMQ"},
		{"DeclareQueueWithoutBinding", exitUsage, []string{"--broker-url", amqpURL, "--queue", "q", "--declare"}, "needs at least one --routing-key"},
		{"BadQueueType", exitUsage, []string{"--broker-url", amqpURL, "--queue", "q", "--queue-type", "stream"}, `--queue-type "stream"`},
		{"MissingExchange", exitUsage, []string{"--broker-url", amqpURL, "--exchange", "ferry_no_such_exchange"},
			"exchange ferry_no_such_exchange does not exist: declare it, or let ferry declare it (--declare)"},
		{"MissingQueue", exitUsage, []string{"--broker-url", amqpURL, "--queue", "ferry_no_such_queue"},
			"queue ferry_no_such_queue does not exist"},
		{"PasswordRedacted", exitFailed, []string{"--broker-url", "amqp://user:s3cr3tpw@127.0.0.1:1/"}, "127.0.0.1:1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// An explicit --connect-timeout: a daemon waits for its broker
			// as long as it runs otherwise.
			code, _, errOut := ferryCLI(t, append([]string{"relay", "--database-url", db, "--connect-timeout", "30s"}, c.args...)...)
			require.Equal(t, c.code, code, errOut)
			require.Contains(t, errOut, c.want)
			require.NotContains(t, errOut, "s3cr3tpw")
		})
	}
}

// A relay process publishing to RabbitMQ is killed with SIGKILL after the
// broker confirmed a batch and before it was marked SENT. The next relay
// publishes those events again, with the same ids: the queue holds each
// event twice, none lost.
func TestRelayCLIToRabbitMQKilledAfterPublish(t *testing.T) {
	t.Parallel()
	const total = 50
	r := setupRabbitRelay(t, total)
	args := r.args("--declare", "--routing-key", r.bind, "--lanes", "1", "--lease", "1s",
		"--publish-timeout", "800ms", "--retry-initial", "10ms")
	cmd, out := child(t, []string{envTestCrashAt + "=" + ferryfault.RelayAfterPublish}, args...)
	requireKilled(t, cmd, out)

	cmd, out = child(t, nil, append(args, "--drain")...)
	require.NoError(t, cmd.Wait(), out.String())
	require.Contains(t, out.String(), fmt.Sprintf("%d published", total))
	require.Contains(t, out.String(), "left: 0 new, 0 sending, 0 dead")
	got := testsvc.ReadRabbitMQQueue(t, testsvc.RabbitMQ(t), r.queue, 2*total, time.Minute)
	count := map[string]int{}
	for _, d := range got {
		count[d.MessageId]++
	}
	for _, id := range r.ids {
		require.Equal(t, 2, count[id], "event %s: published by the dead relay and again by the next", id)
	}
	require.False(t, strings.Contains(out.String(), "guest:guest"), "no password in logs")
}

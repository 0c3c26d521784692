package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry/examples/shop"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp/ferryamqptest"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// The test binary doubles as the shop's binary, so that the demo's
// processes (this executable, re-run with a role's arguments) are the
// shop's roles.
const envExecMain = "SHOP_TEST_EXEC_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envExecMain) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// shopCLI runs the shop's command line in this process.
func shopCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestDemoPasses(t *testing.T) {
	// serial: t.Setenv: the demo's child processes are this binary, told so by the environment.
	testsvc.Slow(t, "the demo")
	t.Setenv(envExecMain, "1") // the demo's child processes are this binary
	code, out, errOut := shopCLI(t, "demo", "--orders", "200")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, "verdict: OK")
	require.Equal(t, 1, strings.Count(out, "verdict:"), "one verdict:\n%s", out)
	require.Contains(t, out, "lost 0, applied twice 0, unexpected 0, wrong 0")
	require.Contains(t, out, "crash points hit: 4")
}

// The demo on Kafka (an in-process kfake cluster): the relay publishes to
// the shop's topics, the consumers join their groups, and the checker's
// verdict is the same.
func TestDemoPassesOnKafka(t *testing.T) {
	// serial: t.Setenv: the demo's child processes are this binary, told so by the environment.
	testsvc.Slow(t, "the demo on Kafka")
	t.Setenv(envExecMain, "1")
	seeds := testsvc.Kafka(t)
	code, out, errOut := shopCLI(t, "demo", "--orders", "100", "--broker-url", "kafka://"+strings.Join(seeds, ","))
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, "verdict: OK")
	require.Equal(t, 1, strings.Count(out, "verdict:"), "one verdict:\n%s", out)
	require.Contains(t, out, "lost 0, applied twice 0, unexpected 0, wrong 0")
	require.Contains(t, out, "crash points hit: 4")
	require.Contains(t, out, "(Kafka stores each copy)")
}

// The demo on RabbitMQ (a vhost of its own on the test server): quorum
// queues, a relay with publisher confirms, consumers that ack after the
// commit, and the same verdict. A second run on the same vhost starts from
// the parking queues the first one filled.
func TestDemoPassesOnRabbitMQ(t *testing.T) {
	// serial: t.Setenv: the demo's child processes are this binary, told so by the environment.
	testsvc.Slow(t, "the demo on RabbitMQ")
	t.Setenv(envExecMain, "1")
	url := ferryamqptest.RabbitMQVhost(t)
	for run := 1; run <= 2; run++ {
		code, out, errOut := shopCLI(t, "demo", "--orders", "100", "--broker-url", url)
		require.Equal(t, exitOK, code, "run %d\nstdout:\n%s\nstderr:\n%s", run, out, errOut)
		require.Contains(t, out, "verdict: OK")
		require.Equal(t, 1, strings.Count(out, "verdict:"), "one verdict:\n%s", out)
		require.Contains(t, out, "lost 0, applied twice 0, unexpected 0, wrong 0")
		require.Contains(t, out, "crash points hit: 4")
		require.Contains(t, out, "(RabbitMQ stores each copy)")
		require.NotContains(t, out, "guest:guest", "the URL is shown without its password")
	}
}

// Queues that still hold messages (another run's, another program's) are
// refused before anything starts: the check would count them.
func TestDemoRefusesRabbitMQQueuesInUse(t *testing.T) {
	t.Parallel()
	url := ferryamqptest.RabbitMQVhost(t)
	require.NoError(t, shop.SetupAMQP(testenv.Context(t, 30*time.Second), url))
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Publish("", "sms", false, false, amqp.Publishing{Body: []byte("left over")}))
	require.NoError(t, ch.Close())
	require.Eventually(t, func() bool {
		n, err := shop.AMQPReady(testenv.Context(t, 10*time.Second), url, "sms")
		return err == nil && n["sms"] == 1
	}, 10*time.Second, 20*time.Millisecond)
	code, out, errOut := shopCLI(t, "demo", "--orders", "20", "--broker-url", url)
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "hold 0 and 1 messages of an earlier run")
	require.Contains(t, errOut, "purge_queue")
	require.NotContains(t, out, "ferry demo:", "nothing started")
}

// -q prints nothing; the exit code tells.
func TestDemoQuiet(t *testing.T) {
	// serial: t.Setenv: the demo's child processes are this binary, told so by the environment.
	t.Setenv(envExecMain, "1")
	code, out, errOut := shopCLI(t, "demo", "-q", "--orders", "100")
	require.Equal(t, exitOK, code, errOut)
	require.Empty(t, out)
}

func TestDemoUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"DemoNotItsBroker", []string{"demo", "--broker-url", "nats://h:4222"}, "the demo runs on amqp:// (RabbitMQ) or kafka:// brokers"},
		{"DemoBadKafkaURL", []string{"demo", "--broker-url", "kafka://"}, "no broker host"},
		{"DemoTooFewOrders", []string{"demo", "--orders", "19"}, "--orders must be at least 20"},
		{"DemoNoRate", []string{"demo", "--rate", "0"}, "--rate positive"},
		{"DemoUnknownFlag", []string{"demo", "--no-such-flag"}, "flag provided but not defined"},
		{"DemoStrayArgument", []string{"demo", "extra"}, "unexpected arguments"},
		{"NoRole", nil, "name a role"},
		{"UnknownRole", []string{"warp"}, `unknown role "warp"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := shopCLI(t, c.args...)
			require.Equal(t, exitUsage, code, errOut)
			require.Contains(t, errOut, c.want)
			require.NotContains(t, out, "ferry demo:", "nothing started")
		})
	}
}

// -h shows the demo's help and its flags, and is no error.
func TestDemoHelp(t *testing.T) {
	t.Parallel()
	code, out, errOut := shopCLI(t, "demo", "-h")
	require.Equal(t, exitOK, code, errOut)
	require.Empty(t, out)
	require.Contains(t, errOut, "Usage: shop demo [flags]")
	for _, f := range []string{"-orders", "-rate", "-keep", "-dir", "-broker-url", "-verbose", "-quiet"} {
		require.Contains(t, errOut, f)
	}
}

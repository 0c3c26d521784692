package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// ferry doctor reads what the broker's confirm of the relay's destinations
// is worth, and ferry relay says it at start: on this single NATS server,
// a stream of one replica, file storage, is "single". With
// --require-durability replicated both exit 2 naming it; with single,
// both go on.
func TestDoctorAndRelaySayWhatAConfirmIsWorth(t *testing.T) {
	t.Parallel()
	b := setupOps(t, "sqlite")
	stream, prefix := testsvc.JetStreamStream(t, testsvc.NATS(t))
	natsURL := testsvc.URL(testsvc.EnvNATS)

	code, out, errOut := ferryCLI(t, "doctor", "--broker-url", natsURL, "--stream", stream)
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, `(?m)^DESTINATION\s+LEVEL\s+SETTINGS\s+FIX$`, out)
	require.Regexp(t, `(?m)^\S.*`+stream+`.*\ssingle\s`, out)

	code, out, errOut = ferryCLI(t, "doctor", "--broker-url", natsURL, "--stream", stream, "--json")
	require.Equal(t, exitOK, code, errOut)
	var rows []ferrybroker.Durability
	require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
	require.Len(t, rows, 1)
	require.Equal(t, ferrybroker.DurabilitySingle, rows[0].Level)
	require.Contains(t, rows[0].Destination, stream)
	require.NotEmpty(t, rows[0].Fix, "a weak row says what to change")

	code, _, errOut = ferryCLI(t, "doctor", "--broker-url", natsURL, "--stream", stream, "--require-durability", "replicated")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "--require-durability replicated: ")
	require.Contains(t, errOut, stream)
	code, _, errOut = ferryCLI(t, "doctor", "--broker-url", natsURL, "--stream", stream, "--require-durability", "single")
	require.Equal(t, exitOK, code, errOut)

	// The relay: a warning at start, or with the requirement, exit 2
	// before it sends anything.
	b.enqueue(t, orderPaid("1", prefix+".paid"))
	code, out, errOut = b.cli(t, "relay", "--drain", "--broker-url", natsURL, "--stream", stream, "--require-durability", "replicated")
	require.Equal(t, exitUsage, code, "%s\n%s", out, errOut)
	require.Contains(t, errOut, "--require-durability replicated: ")
	n, err := b.st.Driver.CountByStatus(b.ctx, "NEW")
	require.NoError(t, err)
	require.EqualValues(t, 1, n["NEW"], "nothing was sent")

	code, out, errOut = b.cli(t, "relay", "--drain", "--broker-url", natsURL, "--stream", stream)
	require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "1 published")
	warn := ""
	for _, line := range strings.Split(errOut, "\n") {
		if strings.Contains(line, "what a confirm is worth") {
			warn = line
		}
	}
	require.Contains(t, warn, "WARN", errOut)
	require.Contains(t, warn, "on one node only")
	require.Contains(t, warn, stream)
}

func TestDoctorUsageErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"NoBroker", []string{"doctor"}, "--broker-url is required"},
		{"BadLevel", []string{"doctor", "--broker-url", "nats://127.0.0.1:1", "--require-durability", "strong"},
			`--require-durability "strong": want replicated, single or volatile`},
		{"ManagementWithNATS", []string{"doctor", "--broker-url", "nats://127.0.0.1:1", "--management-url", "http://x:15672"},
			"--management-url applies to RabbitMQ"},
		{"RelayBadLevel", []string{"relay", "--database-url", "sqlite:///" + t.TempDir() + "/x.db", "--broker-url", "nats://127.0.0.1:1",
			"--require-durability", "unknown"}, "want replicated, single or volatile"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := runQuick(t, c.args...)
			require.Equal(t, exitUsage, code, errOut)
			require.Contains(t, errOut, c.want)
		})
	}
}

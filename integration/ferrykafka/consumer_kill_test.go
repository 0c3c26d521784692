package ferrykafka_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// killChildEnv, when set, makes TestConsumerProcessKilledAfterTheInboxCommit
// the consumer process the test kills: it holds the settings, joined by
// spaces (seeds, topic, park topic, group, SQLite file).
const killChildEnv = "FERRYKAFKA_KILL_CHILD"

// A consumer process is killed (SIGKILL) after its inbox transaction for a
// record committed and before the record's offset was committed. Its
// group membership ends with its session; the consumer that takes the
// partition gets the record again and the inbox reports it a duplicate:
// every effect once.
func TestConsumerProcessKilledAfterTheInboxCommit(t *testing.T) {
	t.Parallel()
	if os.Getenv(killChildEnv) != "" {
		runKilledConsumer(t)
		return
	}
	k := testsvc.NewKafka(t, kfake.GroupMinSessionTimeout(time.Second))
	cl, _ := client(t, k.Seeds, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	b := &kafkaConsumerBundle{ctx: testsvc.Context(t, 2*time.Minute), k: k, topic: testsvc.KafkaTopic(t, k.Seeds, 1),
		park: testsvc.KafkaTopic(t, k.Seeds, 1), group: testsvc.Name("group-"), cl: cl}
	path := filepath.Join(t.TempDir(), "inbox.db")
	ib := openInboxBed(t, path, true)
	ids := []string{"evt-1", "evt-2", "evt-3"}
	for _, id := range ids {
		b.produce(t, event(0, id, "order-1", `{"amount":10}`))
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestConsumerProcessKilledAfterTheInboxCommit$", "-test.v")
	cmd.Env = append(os.Environ(), killChildEnv+"="+strings.Join([]string{strings.Join(k.Seeds, ","), b.topic, b.park, b.group, path}, " "))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("child consumer's stderr:\n%s", stderr.String())
		}
	})
	committed := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "committed evt-2" {
				close(committed)
			}
		}
	}()
	select {
	case <-committed:
	case <-time.After(time.Minute):
		t.Fatal("the child consumer never committed evt-2")
	}
	require.NoError(t, cmd.Process.Kill())
	require.Equal(t, 2, ib.effectRows(t), "evt-1 and evt-2 applied by the killed process")

	c := b.consumer(t, ib.handler(), ferrykafka.ConsumerConfig{ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 1},
		ClientOpts: []kgo.Opt{kgo.SessionTimeout(2 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond)}})
	require.NoError(t, c.Start(b.ctx))
	testsvc.WaitFor(t, time.Minute, func() bool { return len(ib.effects(t)) == 3 }, func() string { return fmt.Sprintf("%+v", c.Stats()) })
	b.waitUnsettled(t, 0)
	require.NoError(t, c.Stop(b.ctx))
	ib.requireOnce(t, ids)
	require.GreaterOrEqual(t, ib.outcomes(ferry.InboxDuplicate), 1, "evt-2 came again and the inbox found it applied")
	require.Equal(t, 1, ib.outcomes(ferry.InboxApplied), "only evt-3 was applied after the kill")
}

// runKilledConsumer is the child process: it consumes with a 2s session
// timeout, and once the inbox committed evt-2, says so and hangs until it
// is killed.
func runKilledConsumer(t *testing.T) {
	f := strings.Fields(os.Getenv(killChildEnv))
	require.Len(t, f, 5)
	seeds, topic, park, group, path := strings.Split(f[0], ","), f[1], f[2], f[3], f[4]
	ib := openInboxBed(t, path, false)
	inner := ib.handler()
	c, err := ferrykafka.NewConsumer([]kgo.Opt{kgo.SeedBrokers(seeds...)}, func(ctx context.Context, d *ferrybroker.Delivery) error {
		if err := inner(ctx, d); err != nil {
			return err
		}
		if d.MessageID == "evt-2" {
			fmt.Println("committed evt-2")
			select {} // until killed
		}
		return nil
	}, &ferrykafka.ConsumerConfig{Group: group, Topics: []string{topic}, ParkTopic: park, ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 1, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))},
		CommitInterval: 50 * time.Millisecond,
		ClientOpts:     []kgo.Opt{kgo.SessionTimeout(2 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond)}})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	select {}
}

// openInboxBed opens the inbox bed in the SQLite file at path, creating
// its tables when create is set.
func openInboxBed(t *testing.T, path string, create bool) *inboxBed {
	t.Helper()
	ctx := testsvc.Context(t, time.Minute)
	s, err := ferrysqlite.Open(ctx, "sqlite://"+path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return newInboxBedOn(t, s.DB(), create)
}

func (ib *inboxBed) effectRows(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, ib.db.QueryRow(`SELECT COUNT(*) FROM effect`).Scan(&n))
	return n
}

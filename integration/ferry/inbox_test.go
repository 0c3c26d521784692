package ferry_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrybroker/ferrynats"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/internal/fault"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// orderPaid is the payload of the order service's OrderPaid event.
type orderPaid struct {
	OrderID int64 `json:"order_id"`
	UserID  int64 `json:"user_id"`
	Amount  int64 `json:"amount"`
}

// decodeOrderPaid maps an OrderPaid delivery to the points-award
// operation: its business key is the order's payment, not the message id.
func decodeOrderPaid(d *ferrybroker.Delivery) (ferry.Operation, error) {
	var p orderPaid
	if err := json.Unmarshal(d.Payload, &p); err != nil {
		return ferry.Operation{}, err
	}
	if p.OrderID == 0 || p.UserID == 0 {
		return ferry.Operation{}, errors.New("order_id and user_id are required")
	}
	return ferry.Operation{
		Key:    fmt.Sprintf("order:%d:paid", p.OrderID),
		Fields: map[string]int64{"user_id": p.UserID, "amount": p.Amount},
	}, nil
}

// awardPoints is the business write, with its effect check.
func awardPoints(table string) func(ctx context.Context, tx *sql.Tx, d *ferrybroker.Delivery) error {
	return func(ctx context.Context, tx *sql.Tx, d *ferrybroker.Delivery) error {
		var p orderPaid
		if err := json.Unmarshal(d.Payload, &p); err != nil {
			return err
		}
		return ferry.ExpectResult(tx.ExecContext(ctx, "UPDATE "+table+" SET points = points + ? WHERE user_id = ?", p.Amount, p.UserID))
	}
}

// outcomeCounter counts inbox outcomes.
type outcomeCounter struct{ applied, duplicate, conflict atomic.Int64 }

func (c *outcomeCounter) OnInbox(_ string, o ferry.InboxOutcome, _ time.Duration) {
	switch o {
	case ferry.InboxApplied:
		c.applied.Add(1)
	case ferry.InboxDuplicate:
		c.duplicate.Add(1)
	case ferry.InboxConflict:
		c.conflict.Add(1)
	}
}

// runPointsConsumer is a child process: a JetStream consumer whose handler
// awards points through the inbox on MariaDB. It exits once the consumer
// has nothing pending, printing its inbox outcomes; FERRY_CHILD_CRASH_AT kills
// it at a named point instead.
func runPointsConsumer() int {
	env := func(k string) string { return os.Getenv("FERRY_CHILD_" + k) }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child:", err); return 1 }
	crash, err := fault.Crash(env("CRASH_AT"))
	// The inbox's crash point fires through the context the consumer
	// starts with.
	ctx = ferryfault.With(ctx, crash)
	if err != nil {
		return fail(err)
	}
	store, err := ferrymysql.Open(ctx, testsvc.URL(testsvc.EnvMySQL), nil)
	if err != nil {
		return fail(err)
	}
	ib, err := ferrymysql.NewInbox(store.DB(), &ferrymysql.InboxConfig{MarkerTable: env("MARKERS"), ConflictTable: env("CONFLICTS"), VersionTable: env("VERSIONS")})
	if err != nil {
		return fail(err)
	}
	counts := &outcomeCounter{}
	in, err := ferry.NewInbox(ib, &ferry.InboxConfig{Consumer: "points-award", Hooks: []ferry.Hook{counts}})
	if err != nil {
		return fail(err)
	}
	handler := ferry.InboxHandler(in, decodeOrderPaid, awardPoints(env("POINTS")))
	var (
		stop   func(context.Context) error
		parked func() int64
		idle   func() (bool, error)
	)
	if queue := env("QUEUE"); queue != "" {
		// RabbitMQ: a quorum queue the test declared.
		c, err := ferryamqp.DialConsumer(testsvc.URL(testsvc.EnvAMQP), queue, handler, &ferryamqp.ConsumerConfig{
			ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 4,
				Redelivery: ferrybroker.RedeliveryPolicy{RetryDelay: 20 * time.Millisecond}},
			Prefetch: 4})
		if err != nil {
			return fail(err)
		}
		if err := c.Start(ctx); err != nil {
			return fail(err)
		}
		conn, err := amqp.Dial(testsvc.URL(testsvc.EnvAMQP))
		if err != nil {
			return fail(err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return fail(err)
		}
		stop, parked = c.Stop, func() int64 { return c.Stats().Parked }
		idle = func() (bool, error) {
			q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
			st := c.Stats()
			return err == nil && q.Messages == 0 && st.InFlight == 0, err
		}
	} else {
		nc, err := nats.Connect(testsvc.URL(testsvc.EnvNATS))
		if err != nil {
			return fail(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		c, err := ferrynats.NewConsumer(js, handler, &ferrynats.ConsumerConfig{
			Stream: env("STREAM"), Durable: "points", FilterSubjects: []string{env("SUBJECT")}, Declare: true,
			ParkSubject: env("PARK"), AckWait: 2 * time.Second,
			ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 4,
				Redelivery: ferrybroker.RedeliveryPolicy{RetryDelay: 20 * time.Millisecond}},
		})
		if err != nil {
			return fail(err)
		}
		if err := c.Start(ctx); err != nil {
			return fail(err)
		}
		stop, parked = c.Stop, func() int64 { return c.Stats().Parked }
		idle = func() (bool, error) {
			cons, err := js.Consumer(ctx, env("STREAM"), "points")
			if err != nil {
				return false, err
			}
			info, err := cons.Info(ctx)
			return err == nil && info.NumPending == 0 && info.NumAckPending == 0, err
		}
	}
	// Exit once nothing is left, seen twice in a row.
	for quiet := 0; quiet < 2; {
		ok, err := idle()
		if err != nil {
			return fail(err)
		}
		if ok {
			quiet++
		} else {
			quiet = 0
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := stop(ctx); err != nil {
		return fail(err)
	}
	fmt.Printf("applied=%d duplicate=%d conflict=%d parked=%d\n", counts.applied.Load(), counts.duplicate.Load(),
		counts.conflict.Load(), parked())
	return 0
}

// A consumer killed after its transaction committed and before it acked
// loses nothing and applies nothing twice: the redelivered messages are
// duplicates for the inbox.
func TestConsumerKilledBetweenCommitAndAck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ broker, point string }{
		{"nats", ferryfault.ConsumerAfterHandle}, {"nats", ferryfault.InboxBeforeCommit},
		{"amqp", ferryfault.ConsumerAfterHandle}, {"amqp", ferryfault.InboxBeforeCommit},
	} {
		point := tc.point
		t.Run(tc.broker+"/"+point, func(t *testing.T) {
			db := testsvc.MySQL(t)
			ctx := testsvc.Context(t, 3*time.Minute)
			m, c, v := testsvc.InboxTables()
			ib, err := ferrymysql.NewInbox(db, &ferrymysql.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
			require.NoError(t, err)
			testsvc.MigratedInbox(t, ib, func(q string) error { _, err := db.Exec(q); return err }, m, m, c, v)
			points := testsvc.Name("points_")
			_, err = db.Exec("CREATE TABLE " + points + " (user_id BIGINT PRIMARY KEY, points BIGINT NOT NULL)")
			require.NoError(t, err)
			t.Cleanup(func() { _, _ = db.Exec("DROP TABLE " + points) })
			_, err = db.Exec("INSERT INTO " + points + " VALUES (7, 0)")
			require.NoError(t, err)

			const orders = 30
			childEnv := []string{"FERRY_TEST_CHILD=points-consumer", "FERRY_CHILD_MARKERS=" + m, "FERRY_CHILD_CONFLICTS=" + c,
				"FERRY_CHILD_VERSIONS=" + v, "FERRY_CHILD_POINTS=" + points}
			body := func(i int) []byte {
				b, _ := json.Marshal(orderPaid{OrderID: int64(i), UserID: 7, Amount: 1})
				return b
			}
			if tc.broker == "nats" {
				nc := testsvc.NATS(t)
				stream, prefix := testsvc.JetStreamStream(t, nc)
				js, _ := jetstream.New(nc)
				for i := 1; i <= orders; i++ {
					msg := nats.NewMsg(prefix + ".paid")
					msg.Data = body(i)
					_, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(fmt.Sprintf("evt-%d", i)))
					require.NoError(t, err)
				}
				childEnv = append(childEnv, "FERRY_CHILD_STREAM="+stream, "FERRY_CHILD_SUBJECT="+prefix+".paid",
					"FERRY_CHILD_PARK="+prefix+".parked")
			} else {
				conn := testsvc.RabbitMQ(t)
				q := testsvc.RabbitMQQueue(t, conn, "quorum", nil)
				ch, err := conn.Channel()
				require.NoError(t, err)
				_, err = ch.QueueDeclare(q.Name+".parking", true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
				require.NoError(t, err)
				testsvc.DeleteRabbitMQQueue(t, q.Name+".parking")
				require.NoError(t, ch.Confirm(false))
				for i := 1; i <= orders; i++ {
					dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "amq.topic", q.RoutingKey, true, false, amqp.Publishing{
						MessageId: fmt.Sprintf("evt-%d", i), ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body(i)})
					require.NoError(t, err)
					ok, err := dc.WaitContext(ctx)
					require.NoError(t, err)
					require.True(t, ok)
				}
				childEnv = append(childEnv, "FERRY_CHILD_QUEUE="+q.Name)
			}
			start := func(extra ...string) (*exec.Cmd, *bytes.Buffer) {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(append(os.Environ(), childEnv...), extra...)
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				require.NoError(t, cmd.Start())
				return cmd, &out
			}

			cmd, out := start("FERRY_CHILD_CRASH_AT=" + point + ":10")
			err = cmd.Wait()
			var ee *exec.ExitError
			require.True(t, errors.As(err, &ee), "the consumer must die: %v\n%s", err, out)
			require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal(), out.String())

			cmd, out = start()
			require.NoError(t, cmd.Wait(), out.String())
			var applied, dup, conflict, parked int
			// The result is the last line; the consumer's log lines come before it.
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			_, err = fmt.Sscanf(lines[len(lines)-1], "applied=%d duplicate=%d conflict=%d parked=%d", &applied, &dup, &conflict, &parked)
			require.NoError(t, err, out.String())

			var got int64
			require.NoError(t, db.QueryRow("SELECT points FROM "+points+" WHERE user_id = 7").Scan(&got))
			require.Equal(t, int64(orders), got, "every order awarded exactly once")
			n, err := ib.MarkerCount(ctx, "points-award")
			require.NoError(t, err)
			require.Equal(t, int64(orders), n)
			require.Zero(t, conflict+parked)
			if point == ferryfault.ConsumerAfterHandle {
				require.GreaterOrEqual(t, dup, 1, "the message committed before the kill came back as a duplicate")
			}
			// Killed inside the transaction, the operation rolled back: its
			// redelivery applied it (points above). Other handlers may have
			// committed without acking at the same moment, so duplicates
			// can appear in either case.
		})
	}
}

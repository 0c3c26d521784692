// Package cloudevents_test checks ferry's CloudEvents (ferrycloudevents)
// against the CloudEvents Go SDK on each broker, both ways: events a real
// relay publishes with the Encoding are read by consumers written with
// the SDK's protocol bindings alone, and events the SDK's bindings write
// are read by ferry's consumers with the Decoding and applied once by a
// real Inbox on PostgreSQL.
package cloudevents_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/protocol"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrycloudevents"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

const (
	// source is the source of the events the relay publishes.
	source = "/orders-service"
	// traceparent is the trace context every enqueued event carries: it
	// travels as the extension of the same name.
	traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	// waitLong bounds every wait for a broker, a relay or a consumer.
	waitLong = 2 * time.Minute
)

// modes are the content modes each test runs in.
var modes = []ferrycloudevents.Mode{ferrycloudevents.Binary, ferrycloudevents.Structured}

// sdkEncoding is the SDK's name of a content mode.
func sdkEncoding(mode ferrycloudevents.Mode) binding.Encoding {
	if mode == ferrycloudevents.Structured {
		return binding.EncodingStructured
	}
	return binding.EncodingBinary
}

// forceMode returns ctx telling the SDK's writers to write mode.
func forceMode(ctx context.Context, mode ferrycloudevents.Mode) context.Context {
	if mode == ferrycloudevents.Structured {
		return binding.WithForceStructured(ctx)
	}
	return binding.WithForceBinary(ctx)
}

// encoding is the publishers' Encoding in mode.
func encoding(t *testing.T, mode ferrycloudevents.Mode) *ferrycloudevents.Encoding {
	t.Helper()
	enc, err := ferrycloudevents.NewEncoding(ferrycloudevents.Config{Source: source, Mode: mode})
	require.NoError(t, err)
	return enc
}

// orderPaid is the payload of the events, both ways.
type orderPaid struct {
	OrderID int64 `json:"order_id"`
	Amount  int64 `json:"amount"`
}

// outbox is an outbox table on SQLite, the relay's store.
type outbox struct {
	ctx context.Context
	st  testsvc.SQLStore
	ob  *ferry.Outbox[*sql.Tx]
}

func newOutbox(t *testing.T) *outbox {
	t.Helper()
	o := &outbox{ctx: testsvc.Context(t, waitLong), st: testsvc.Store(t, "sqlite")}
	var err error
	o.ob, err = ferry.NewOutbox(o.st.Driver, nil)
	require.NoError(t, err)
	return o
}

// enqueue writes n OrderPaid events for dest in one transaction, two per
// order (sequences 1 and 2), each with a trace context, and returns them
// as the store holds them: what the relay publishes.
func (o *outbox) enqueue(t *testing.T, dest string, n int) []ferrytype.Message {
	t.Helper()
	events := make([]ferry.Event, n)
	for i := range events {
		payload, err := json.Marshal(orderPaid{OrderID: int64(i + 1), Amount: int64(100 * (i + 1))})
		require.NoError(t, err)
		events[i] = ferry.Event{AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", i/2+1), Type: "OrderPaid",
			Payload: payload, Headers: map[string]string{"traceparent": traceparent}, Destination: dest}
	}
	tx, err := o.st.DB.BeginTx(o.ctx, nil)
	require.NoError(t, err)
	ids, err := o.ob.EnqueueTx(o.ctx, tx, events...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	out := make([]ferrytype.Message, len(ids))
	for i, id := range ids {
		row, err := o.st.Driver.Get(o.ctx, id)
		require.NoError(t, err)
		require.False(t, row.CreatedAt.IsZero())
		out[i] = row.Message
	}
	return out
}

// relay runs a relay publishing through pub until none of the n events
// enqueued is pending, and stops it: each must be confirmed once.
func (o *outbox) relay(t *testing.T, pub ferrybroker.Publisher, n int) {
	t.Helper()
	t.Cleanup(func() { _ = pub.Close() })
	r, err := ferry.NewRelay(o.st.Driver, pub, &ferry.RelayConfig{PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, r.Start(o.ctx))
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	testsvc.WaitFor(t, waitLong, func() bool {
		st, err := o.st.Driver.Stats(o.ctx)
		require.NoError(t, err)
		return st.New == 0 && st.Sending == 0
	}, func() string { return fmt.Sprintf("events still pending; relay %+v", r.Stats()) })
	require.NoError(t, r.Stop(o.ctx))
	s := r.Stats()
	require.Equal(t, int64(n), s.Confirmed, "every event confirmed once: %+v", s)
	require.Zero(t, s.Dead+s.Rejected+s.Returned, "%+v", s)
}

// received is a message an SDK receiver took, as the SDK read it.
type received struct {
	enc binding.Encoding // the content mode the SDK saw
	ev  *event.Event
}

// receiveSDK takes n messages from r, turns each into an event with the
// SDK (binding.ToEvent) and settles it as handled (Finish).
func receiveSDK(t *testing.T, ctx context.Context, r protocol.Receiver, n int) []received {
	t.Helper()
	out := make([]received, 0, n)
	for len(out) < n {
		msg, err := r.Receive(ctx)
		if err != nil {
			t.Fatalf("the SDK received %d of %d messages: %v", len(out), n, err)
		}
		enc := msg.ReadEncoding()
		ev, err := binding.ToEvent(ctx, msg)
		ferr := msg.Finish(err)
		require.NoError(t, err, "the SDK reads message %d (encoding %s) as an event", len(out)+1, enc)
		require.NoError(t, ferr)
		out = append(out, received{enc: enc, ev: ev})
	}
	return out
}

// checkReceived checks that got holds each of want once, read by the SDK
// in mode.
func checkReceived(t *testing.T, got []received, want []ferrytype.Message, mode ferrycloudevents.Mode) {
	t.Helper()
	require.Len(t, got, len(want))
	byID := map[string]received{}
	for _, r := range got {
		_, dup := byID[r.ev.ID()]
		require.False(t, dup, "event %s received twice", r.ev.ID())
		byID[r.ev.ID()] = r
	}
	for _, m := range want {
		r, ok := byID[m.ID]
		require.True(t, ok, "event %s not received", m.ID)
		require.Equal(t, sdkEncoding(mode), r.enc, "event %s: the SDK's content mode", m.ID)
		checkEvent(t, r.ev, m, mode)
	}
}

// checkEvent checks that ev, as the SDK read it, is a valid CloudEvent
// and is m as the package documentation maps it.
func checkEvent(t *testing.T, ev *event.Event, m ferrytype.Message, mode ferrycloudevents.Mode) {
	t.Helper()
	require.NoError(t, ev.Validate(), "event %s is a valid CloudEvent", m.ID)
	require.Equal(t, event.CloudEventsVersionV1, ev.SpecVersion())
	require.Equal(t, m.ID, ev.ID(), "id: the event id")
	require.Equal(t, m.Type, ev.Type(), "type: the event type")
	require.Equal(t, source, ev.Source(), "source: Config.Source")
	require.Equal(t, m.AggregateID, ev.Subject(), "subject: the aggregate id")
	require.True(t, m.CreatedAt.Equal(ev.Time()), "time %s: created_at %s", ev.Time(), m.CreatedAt)
	require.Equal(t, "application/json", ev.DataContentType())
	if mode == ferrycloudevents.Binary {
		require.Equal(t, string(m.Payload), string(ev.Data()), "binary mode: data is the payload, unchanged")
	} else {
		require.JSONEq(t, string(m.Payload), string(ev.Data()), "data: the payload")
	}
	ext := ev.Extensions()
	require.Equal(t, m.AggregateType, extString(t, ext, ferrycloudevents.ExtAggregateType))
	require.Equal(t, strconv.FormatInt(m.Sequence, 10), extString(t, ext, ferrycloudevents.ExtSequence))
	require.Equal(t, traceparent, extString(t, ext, "traceparent"))
	require.Positive(t, m.Sequence)
}

func extString(t *testing.T, ext map[string]any, name string) string {
	t.Helper()
	v, ok := ext[name]
	require.True(t, ok, "extension %s is missing: %v", name, ext)
	s, err := types.ToString(v)
	require.NoError(t, err, "extension %s", name)
	return s
}

// sdkEvents returns n events as another service writes them with the SDK:
// its own ids, source and type; subject, ferry's extensions and a time set.
func sdkEvents(t *testing.T, n int) []event.Event {
	t.Helper()
	run := testsvc.Name("")
	out := make([]event.Event, n)
	for i := range out {
		e := event.New()
		e.SetID(fmt.Sprintf("billing-%s-%d", run, i+1))
		e.SetSource("/billing-service")
		e.SetType("com.example.billing.order.paid")
		e.SetSubject(fmt.Sprintf("o-%d", i+1))
		e.SetTime(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC).Add(time.Duration(i) * time.Second))
		e.SetExtension(ferrycloudevents.ExtAggregateType, "order")
		e.SetExtension(ferrycloudevents.ExtSequence, strconv.Itoa(i+1))
		e.SetExtension("traceparent", traceparent)
		require.NoError(t, e.SetData(event.ApplicationJSON, orderPaid{OrderID: int64(i + 1), Amount: int64(10 * (i + 1))}))
		require.NoError(t, e.Validate())
		out[i] = e
	}
	return out
}

// inbox is a consumer's Inbox on PostgreSQL whose business write records
// each order it applies, and how often.
type inbox struct {
	ctx    context.Context
	db     *sql.DB
	orders string
	in     *ferry.Inbox[*sql.Tx]

	applied, duplicate, other atomic.Int64 // inbox outcomes

	mu      sync.Mutex
	seen    []ferrybroker.Delivery // every delivery the handler ran for
	loseAck map[string]bool        // message ids whose first success is reported failed
}

func newInbox(t *testing.T) *inbox {
	t.Helper()
	b := &inbox{ctx: testsvc.Context(t, waitLong), db: testsvc.PostgresSQL(t), loseAck: map[string]bool{}}
	m, c, v := testsvc.InboxTables()
	store, err := ferrypg.NewStdlibInbox(b.db, &ferrypg.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v})
	require.NoError(t, err)
	exec := func(q string) error { _, err := b.db.Exec(q); return err }
	testsvc.MigratedInbox(t, store, exec, m, m, c, v)
	b.orders = m + "_orders"
	require.NoError(t, exec("CREATE TABLE "+b.orders+
		" (order_id BIGINT PRIMARY KEY, amount BIGINT NOT NULL, applied INT NOT NULL)"))
	t.Cleanup(func() { _ = exec("DROP TABLE IF EXISTS " + b.orders) })
	b.in, err = ferry.NewInbox(store, &ferry.InboxConfig{Consumer: "cloudevents-orders", Hooks: []ferry.Hook{b}})
	require.NoError(t, err)
	return b
}

// OnInbox counts the inbox's outcomes (ferry.HookInbox).
func (b *inbox) OnInbox(_ string, o ferry.InboxOutcome, _ time.Duration) {
	switch o {
	case ferry.InboxApplied:
		b.applied.Add(1)
	case ferry.InboxDuplicate:
		b.duplicate.Add(1)
	default:
		b.other.Add(1)
	}
}

// loseAckOf makes the handler fail the first delivery of id after its
// transaction committed, as if its ack were lost: the broker delivers it
// again.
func (b *inbox) loseAckOf(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.loseAck[id] = true
}

// handler is the consumer's handler: the operation of a delivery is keyed
// by its message id (the CloudEvent's id once decoded), and orderOf reads
// the order it pays from the payload.
func (b *inbox) handler(orderOf func(payload []byte) (orderPaid, error)) ferrybroker.Handler {
	q := "INSERT INTO " + b.orders + " (order_id, amount, applied) VALUES ($1, $2, 1)" +
		" ON CONFLICT (order_id) DO UPDATE SET applied = " + b.orders + ".applied + 1"
	h := ferry.InboxHandler(b.in, func(d *ferrybroker.Delivery) (ferry.Operation, error) {
		if d.MessageID == "" {
			return ferry.Operation{}, errors.New("no message id")
		}
		p, err := orderOf(d.Payload)
		if err != nil {
			return ferry.Operation{}, err
		}
		return ferry.Operation{Key: "cloudevent:" + d.MessageID, Fields: p}, nil
	}, func(ctx context.Context, tx *sql.Tx, d *ferrybroker.Delivery) error {
		p, err := orderOf(d.Payload)
		if err != nil {
			return err
		}
		return ferry.ExpectResult(tx.ExecContext(ctx, q, p.OrderID, p.Amount))
	})
	return func(ctx context.Context, d *ferrybroker.Delivery) error {
		b.mu.Lock()
		b.seen = append(b.seen, *d)
		b.mu.Unlock()
		if err := h(ctx, d); err != nil {
			return err
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.loseAck[d.MessageID] {
			delete(b.loseAck, d.MessageID)
			return fmt.Errorf("ack of %s lost after its commit (the test's fault)", d.MessageID)
		}
		return nil
	}
}

// orderOfPayload reads an order from a payload that is the order.
func orderOfPayload(payload []byte) (orderPaid, error) {
	var p orderPaid
	if err := json.Unmarshal(payload, &p); err != nil {
		return p, err
	}
	if p.OrderID == 0 {
		return p, fmt.Errorf("no order_id in %s", payload)
	}
	return p, nil
}

// wait waits until the inbox applied applied operations and found dups
// duplicates, and the consumer settled acked deliveries.
func (b *inbox) wait(t *testing.T, applied, dups int64, stats func() ferrybroker.ConsumerStats, acked int64) {
	t.Helper()
	testsvc.WaitFor(t, waitLong, func() bool {
		s := stats()
		if s.Parked > 0 {
			return true // a failure: said below
		}
		return b.applied.Load() >= applied && b.duplicate.Load() >= dups && s.Acked >= acked && s.InFlight == 0
	}, func() string {
		return fmt.Sprintf("inbox applied %d of %d, duplicates %d of %d; consumer %+v", b.applied.Load(), applied,
			b.duplicate.Load(), dups, stats())
	})
	s := stats()
	require.Zero(t, s.Parked, "nothing parked: %+v", s)
	require.Equal(t, applied, b.applied.Load(), "operations applied")
	require.Equal(t, dups, b.duplicate.Load(), "duplicates found by the inbox")
	require.Zero(t, b.other.Load(), "no conflict, no stale operation")
}

// checkApplied checks the business table: each order of events once, with
// its amount.
func (b *inbox) checkApplied(t *testing.T, want map[int64]int64) {
	t.Helper()
	rows, err := b.db.QueryContext(b.ctx, "SELECT order_id, amount, applied FROM "+b.orders)
	require.NoError(t, err)
	defer rows.Close()
	got := map[int64]int64{}
	for rows.Next() {
		var id, amount, applied int64
		require.NoError(t, rows.Scan(&id, &amount, &applied))
		require.Equal(t, int64(1), applied, "order %d applied once", id)
		got[id] = amount
	}
	require.NoError(t, rows.Err())
	require.Equal(t, want, got)
}

// checkDecoded checks that every delivery the handler saw is one of events
// as the Decoding reads it: its id, type, subject, ferry's extensions and
// the other attributes as headers. checkTime says whether the time
// attribute is expected to have survived the broker.
func (b *inbox) checkDecoded(t *testing.T, events []event.Event, checkTime bool) {
	t.Helper()
	byID := map[string]event.Event{}
	for _, e := range events {
		byID[e.ID()] = e
	}
	b.mu.Lock()
	seen := append([]ferrybroker.Delivery(nil), b.seen...)
	b.mu.Unlock()
	require.NotEmpty(t, seen)
	for _, d := range seen {
		e, ok := byID[d.MessageID]
		require.True(t, ok, "delivery %q is none of the events sent", d.MessageID)
		require.Equal(t, e.Type(), d.Type)
		require.Equal(t, e.Subject(), d.AggregateID, "the aggregate id: the subject")
		require.Equal(t, "order", d.AggregateType)
		seq, err := types.ToString(e.Extensions()[ferrycloudevents.ExtSequence])
		require.NoError(t, err)
		require.Equal(t, seq, strconv.FormatInt(d.Sequence, 10))
		require.Equal(t, e.Source(), d.Headers["source"])
		require.Equal(t, traceparent, d.Headers["traceparent"])
		if checkTime {
			require.Equal(t, e.Time().UTC().Format(time.RFC3339Nano), d.Headers["time"])
		}
		require.JSONEq(t, string(e.Data()), string(d.Payload), "the payload: the data")
	}
}

// wantOrders is the business table once events are applied.
func wantOrders(t *testing.T, events []event.Event) map[int64]int64 {
	t.Helper()
	out := map[int64]int64{}
	for _, e := range events {
		p, err := orderOfPayload(e.Data())
		require.NoError(t, err)
		out[p.OrderID] = p.Amount
	}
	return out
}

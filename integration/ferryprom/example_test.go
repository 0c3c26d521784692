package ferryprom_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryprom"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
)

// confirmAll stands in for a broker in this example only: it confirms
// every message without sending it anywhere. It proves nothing about
// delivery; the tests use a real broker.
type confirmAll struct{}

func (confirmAll) Publish(_ context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	out := make([]ferrytype.PublishResult, len(msgs))
	for i := range out {
		out[i] = ferrytype.Confirmed()
	}
	return out
}

func (confirmAll) Close() error { return nil }

// printMetrics writes the value of each named series of reg.
func printMetrics(reg prometheus.Gatherer, when string, names ...string) {
	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range names {
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				var pairs []string
				for _, l := range m.GetLabel() {
					if l.GetName() != "table" && l.GetName() != "consumer" {
						pairs = append(pairs, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
					}
				}
				label := ""
				if len(pairs) > 0 {
					label = "{" + strings.Join(pairs, ",") + "}"
				}
				switch {
				case m.Counter != nil:
					fmt.Printf("%s: %s%s %g\n", when, name, label, m.Counter.GetValue())
				case m.Gauge != nil:
					fmt.Printf("%s: %s%s %g\n", when, name, label, m.Gauge.GetValue())
				}
			}
		}
	}
}

// Relay metrics come from hooks; the outbox's state (the age of the oldest
// pending event above all) comes from the database. Both register with a
// registry you own; serve it with promhttp.HandlerFor(reg, ...).
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ferryprom-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := ferrysqlite.Open(ctx, "sqlite://"+filepath.Join(dir, "app.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	metrics, err := ferryprom.New(reg, nil)
	if err != nil {
		log.Fatal(err)
	}
	tables, err := ferryprom.NewOutboxCollector(reg, []ferrystore.Store{store}, nil)
	if err != nil {
		log.Fatal(err)
	}
	// tables.Start(ctx) polls in the background; here one poll at a time.

	outbox, err := ferry.NewOutbox(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	tx, err := store.DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := outbox.EnqueueTx(ctx, tx, ferry.Event{AggregateType: "order", AggregateID: fmt.Sprint(i),
			Type: "OrderPaid", Payload: json.RawMessage(`{}`)}); err != nil {
			log.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	if err := tables.Poll(ctx); err != nil {
		log.Fatal(err)
	}
	printMetrics(reg, "before", "ferry_outbox_events")

	relay, err := ferry.NewRelay(store, confirmAll{}, &ferry.RelayConfig{Hooks: []ferry.Hook{metrics}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := relay.Drain(ctx); err != nil {
		log.Fatal(err)
	}
	if err := tables.Poll(ctx); err != nil {
		log.Fatal(err)
	}
	printMetrics(reg, "after", "ferry_relay_publish_outcomes_total", "ferry_relay_sent_total", "ferry_outbox_oldest_pending_age_seconds")
	// Output:
	// before: ferry_outbox_events{status="dead"} 0
	// before: ferry_outbox_events{status="new"} 3
	// before: ferry_outbox_events{status="sending"} 0
	// after: ferry_relay_publish_outcomes_total{destination="OrderPaid",outcome="confirmed"} 3
	// after: ferry_relay_publish_outcomes_total{destination="OrderPaid",outcome="rejected"} 0
	// after: ferry_relay_publish_outcomes_total{destination="OrderPaid",outcome="returned"} 0
	// after: ferry_relay_publish_outcomes_total{destination="OrderPaid",outcome="unknown"} 0
	// after: ferry_relay_sent_total{destination="OrderPaid"} 3
	// after: ferry_outbox_oldest_pending_age_seconds 0
}

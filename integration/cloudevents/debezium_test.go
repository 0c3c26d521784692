package cloudevents_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrydev/ferry/internal/testsvc"
)

// debeziumChange is a change event as Debezium's CloudEventsConverter
// writes it (JSON, schemas off): the structured envelope as the record's
// value, with no content-type header (Kafka Connect's converters write
// none), its id made of the connector's name and the change's position,
// its source info as iodebezium* extensions (some spelled as Debezium
// spells them: iodebeziumtxId, a null iodebeziumxmin, names longer than
// the 20 characters the specification recommends), and the change event
// (before, after) as data.
func debeziumChange(lsn, txID, orderID, amount int64) (id string, value []byte) {
	id = fmt.Sprintf("name:test_server;lsn:%d;txId:%d", lsn, txID)
	return id, fmt.Appendf(nil, `{
  "id" : %q,
  "source" : "/debezium/postgresql/test_server",
  "specversion" : "1.0",
  "type" : "io.debezium.connector.postgresql.DataChangeEvent",
  "time" : "2026-01-13T13:55:39.738Z",
  "datacontenttype" : "application/json",
  "iodebeziumop" : "c",
  "iodebeziumversion" : "2.7.4.Final",
  "iodebeziumconnector" : "postgresql",
  "iodebeziumname" : "test_server",
  "iodebeziumtsms" : "1768312539738",
  "iodebeziumsnapshot" : "false",
  "iodebeziumdb" : "postgres",
  "iodebeziumschema" : "public",
  "iodebeziumtable" : "orders",
  "iodebeziumtxId" : "%d",
  "iodebeziumlsn" : "%d",
  "iodebeziumxmin" : null,
  "iodebeziumtxtotalorder" : "1",
  "iodebeziumtxdatacollectionorder" : "1",
  "data" : {
    "before" : null,
    "after" : { "order_id" : %d, "amount" : %d }
  }
}`, id, txID, lsn, orderID, amount)
}

// orderOfChange reads the order a Debezium change event's after image
// holds.
func orderOfChange(payload []byte) (orderPaid, error) {
	var change struct {
		After *orderPaid `json:"after"`
	}
	if err := json.Unmarshal(payload, &change); err != nil {
		return orderPaid{}, err
	}
	if change.After == nil || change.After.OrderID == 0 {
		return orderPaid{}, fmt.Errorf("no after image in %s", payload)
	}
	return *change.After, nil
}

// Debezium's CloudEventsConverter writes two inserts of the orders table
// to Kafka (kfake; produced here with franz-go, as Kafka Connect would),
// and the first again, as a connector restarted from an older offset
// does. ferry's Kafka consumer reads them with the Decoding (a JSON value
// with a specversion member and no content type) and applies each change
// through the Inbox once, by its CloudEvent id: the copy, and the
// redelivery of one whose ack was lost, are duplicates.
func TestKafkaDebeziumCloudEventsToInbox(t *testing.T) {
	t.Parallel()
	ctx := testsvc.Context(t, waitLong)
	b := newInbox(t)
	k := testsvc.NewKafka(t)
	topic := testsvc.KafkaTopic(t, k.Seeds, 1)
	id1, v1 := debeziumChange(29274832, 565, 7, 700)
	id2, v2 := debeziumChange(29275120, 566, 8, 800)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Seeds...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer cl.Close()
	for _, r := range []struct {
		key   string
		value []byte
	}{{`{"order_id":7}`, v1}, {`{"order_id":8}`, v2}, {`{"order_id":7}`, v1}} {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Key: []byte(r.key), Value: r.value}).FirstErr())
	}

	b.loseAckOf(id2)
	c := newKafkaConsumer(t, k.Seeds, topic, b.handler(orderOfChange))
	require.NoError(t, c.Start(ctx))
	b.wait(t, 2, 2, c.Stats, 3)
	require.NoError(t, c.Stop(ctx))
	b.checkApplied(t, map[int64]int64{7: 700, 8: 800})

	b.mu.Lock()
	defer b.mu.Unlock()
	require.Len(t, b.seen, 4, "three records, one delivered twice")
	for _, d := range b.seen {
		require.Contains(t, []string{id1, id2}, d.MessageID, "the message id: the CloudEvent's id")
		require.Equal(t, "io.debezium.connector.postgresql.DataChangeEvent", d.Type)
		require.Equal(t, "/debezium/postgresql/test_server", d.Headers["source"])
		require.Equal(t, "2026-01-13T13:55:39.738Z", d.Headers["time"])
		require.Equal(t, "c", d.Headers["iodebeziumop"])
		require.Equal(t, "orders", d.Headers["iodebeziumtable"])
		require.Equal(t, "1", d.Headers["iodebeziumtxdatacollectionorder"], "a name longer than 20 characters")
		require.NotContains(t, d.Headers, "iodebeziumxmin", "a null extension is none")
		p, err := orderOfChange(d.Payload)
		require.NoError(t, err, "the payload: the change event")
		require.Equal(t, fmt.Sprintf(`{"order_id":%d}`, p.OrderID), d.AggregateID,
			"no subject: the aggregate id is the record's key, as without the Decoding")
		if d.MessageID == id1 {
			require.Equal(t, "565", d.Headers["iodebeziumtxid"], "iodebeziumtxId, in lower case")
		}
	}
}

// A consumer with the Decoding reads what is no CloudEvent as it does
// without one: records of Debezium's outbox event router (its id header,
// the aggregate id as the key, the aggregate type in the topic's name)
// keep the metadata the Kafka consumer finds for them.
func TestKafkaDecodingKeepsTheRecordsMetadata(t *testing.T) {
	t.Parallel()
	ctx := testsvc.Context(t, waitLong)
	b := newInbox(t)
	k := testsvc.NewKafka(t)
	topic := "outbox.event.order"
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Seeds...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Key: []byte(`"o-9"`), Value: []byte(`{"order_id":9,"amount":900}`),
		Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(`"4d47e190-0402-4048-bc2c-89dd54343cdc"`)}}}).FirstErr())

	c := newKafkaConsumer(t, k.Seeds, topic, b.handler(orderOfPayload))
	require.NoError(t, c.Start(ctx))
	b.wait(t, 1, 0, c.Stats, 1)
	require.NoError(t, c.Stop(ctx))
	b.checkApplied(t, map[int64]int64{9: 900})
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Len(t, b.seen, 1)
	d := b.seen[0]
	require.Equal(t, "4d47e190-0402-4048-bc2c-89dd54343cdc", d.MessageID)
	require.Equal(t, "o-9", d.AggregateID, "the record's key")
	require.Equal(t, "order", d.AggregateType, "the topic's suffix after outbox.event.")
}

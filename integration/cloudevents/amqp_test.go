package cloudevents_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp1 "github.com/Azure/go-amqp"
	ceamqp "github.com/cloudevents/sdk-go/protocol/amqp/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrycloudevents"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// The CloudEvents Go SDK binds CloudEvents to AMQP 1.0; ferry publishes
// and consumes AMQP 0-9-1. RabbitMQ 3.x speaks AMQP 1.0 through its
// rabbitmq_amqp1_0 plugin (scripts/services.sh enables it) on the 0-9-1
// port, converting messages between the two, and what the conversion
// keeps decides what crosses:
//
//   - The content type crosses both ways (0-9-1 content_type, 1.0
//     properties' content-type): structured mode works both ways.
//   - 0-9-1 headers do not become 1.0 application properties: RabbitMQ 3.x
//     gives a 1.0 receiver application properties only from a message
//     that came over 1.0, so an SDK receiver finds none of ferry's binary
//     mode attributes (cloudEvents:id, ...) and no CloudEvent.
//   - 1.0 application properties do not become 0-9-1 headers one by one:
//     RabbitMQ keeps the section, AMQP 1.0-encoded, in a single header
//     (x-amqp-1.0-app-properties), so ferry's consumer finds none of the
//     SDK's binary mode attributes.
//
// Binary mode is therefore checked against the SDK's AMQP binding on the
// 0-9-1 side of RabbitMQ: ferry's headers read by the binding's message
// type (ceamqp.NewMessage) as the application properties they are, and
// the application properties the binding writes (ceamqp.WriteMessage)
// published as the headers they are, which is what a broker that maps
// one onto the other (RabbitMQ 4's native AMQP 1.0 does) delivers. The
// binary subtests also send each way through AMQP 1.0 and check that
// RabbitMQ does either that or what 3.x does, logging which.

// amqp10URL returns the URL of the shared RabbitMQ for AMQP 1.0 clients,
// skipping (or failing) the test when the server or its AMQP 1.0 plugin
// is not there.
func amqp10URL(t *testing.T) string {
	t.Helper()
	testsvc.RabbitMQ(t) // skips when RabbitMQ is not there
	u := testsvc.URL(testsvc.EnvAMQP)
	cl, err := amqp1.Dial(u, amqp1.ConnConnectTimeout(5*time.Second))
	if err != nil {
		testsvc.Unavailable(t, "AMQP 1.0 on RabbitMQ at "+ferrytype.RedactURL(u)+
			" (its rabbitmq_amqp1_0 plugin, which scripts/services.sh enables)", err)
	}
	_ = cl.Close()
	return u
}

// sdkReceiver is an SDK AMQP 1.0 receiver of the existing queue, closed
// when the test ends.
func sdkReceiver(t *testing.T, url, queue string) *ceamqp.Protocol {
	t.Helper()
	p, err := ceamqp.NewReceiverProtocol(url, "/amq/queue/"+queue, []amqp1.ConnOption{amqp1.ConnConnectTimeout(5 * time.Second)}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// sdkSender is an SDK AMQP 1.0 sender to the existing queue, closed when
// the test ends.
func sdkSender(t *testing.T, url, queue string) *ceamqp.Protocol {
	t.Helper()
	p, err := ceamqp.NewSenderProtocol(url, "/amq/queue/"+queue, []amqp1.ConnOption{amqp1.ConnConnectTimeout(5 * time.Second)}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// bindAlso binds queue to amq.topic with routingKey too.
func bindAlso(t *testing.T, conn *amqp.Connection, queue, routingKey string) {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.QueueBind(queue, routingKey, "amq.topic", false, nil))
}

// asAMQP10 is a 0-9-1 delivery as an AMQP 1.0 message that maps its
// headers onto application properties and its message_id and
// content_type onto the properties: what the SDK's AMQP binding reads.
func asAMQP10(d amqp.Delivery) *amqp1.Message {
	props := make(map[string]any, len(d.Headers))
	for k, v := range d.Headers {
		props[k] = v
	}
	ct := d.ContentType
	return &amqp1.Message{Properties: &amqp1.MessageProperties{MessageID: d.MessageId, ContentType: &ct},
		ApplicationProperties: props, Data: [][]byte{d.Body}}
}

// ceProperties returns the application properties of m that carry
// CloudEvents attributes.
func ceProperties(m *amqp1.Message) map[string]any {
	out := map[string]any{}
	for k, v := range m.ApplicationProperties {
		if strings.HasPrefix(k, ferrycloudevents.AMQPPrefix) || strings.HasPrefix(k, ferrycloudevents.AMQPPrefixNew) {
			out[k] = v
		}
	}
	return out
}

// A relay publishes the outbox's events to RabbitMQ with the CloudEvents
// Encoding. Structured: the SDK's AMQP 1.0 receiver takes each from the
// queue and reads a valid CloudEvent with ferry's mapping. Binary: the
// SDK's AMQP binding reads each, as RabbitMQ delivers it over 0-9-1, from
// its headers; over AMQP 1.0 the SDK reads it as well, or (RabbitMQ 3.x)
// finds no attribute at all, the rest of the message intact.
func TestAMQPRelayToSDKConsumer(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			url := amqp10URL(t)
			ctx := testsvc.Context(t, waitLong)
			conn := testsvc.RabbitMQ(t)
			q := testsvc.RabbitMQQueue(t, conn, "quorum", nil)
			o := newOutbox(t)
			want := o.enqueue(t, q.RoutingKey, 4)
			var q091 testsvc.RabbitQueue
			if mode == ferrycloudevents.Binary {
				q091 = testsvc.RabbitMQQueue(t, conn, "quorum", nil)
				bindAlso(t, conn, q091.Name, q.RoutingKey)
			}
			pub, err := ferryamqp.Dial(ctx, url, &ferryamqp.Config{Encoding: encoding(t, mode)})
			require.NoError(t, err)
			o.relay(t, pub, len(want))

			if mode == ferrycloudevents.Structured {
				got := receiveSDK(t, ctx, sdkReceiver(t, url, q.Name), len(want))
				checkReceived(t, got, want, mode)
				return
			}

			// Binary, over 0-9-1: the SDK's AMQP binding reads ferry's
			// headers as application properties.
			var got []received
			for _, d := range testsvc.ReadRabbitMQQueue(t, conn, q091.Name, len(want), waitLong) {
				m := ceamqp.NewMessage(asAMQP10(d), nil)
				ev, err := binding.ToEvent(ctx, m)
				require.NoError(t, err, "the SDK's AMQP binding reads message %s", d.MessageId)
				got = append(got, received{enc: m.ReadEncoding(), ev: ev})
			}
			checkReceived(t, got, want, mode)

			// Binary, over AMQP 1.0.
			r := sdkReceiver(t, url, q.Name)
			byID := map[string]ferrytype.Message{}
			for _, m := range want {
				byID[m.ID] = m
			}
			dropped := 0
			for range want {
				msg, err := r.Receive(ctx)
				require.NoError(t, err)
				m := msg.(*ceamqp.Message)
				id, _ := m.AMQP.Properties.MessageID.(string)
				w, ok := byID[id]
				require.True(t, ok, "message_id %v is none of the events", m.AMQP.Properties.MessageID)
				if msg.ReadEncoding() == binding.EncodingBinary {
					ev, err := binding.ToEvent(ctx, msg)
					require.NoError(t, err)
					checkEvent(t, ev, w, mode)
				} else {
					// RabbitMQ 3.x: the headers are gone, the rest is there.
					require.Equal(t, binding.EncodingUnknown, msg.ReadEncoding())
					require.Empty(t, ceProperties(m.AMQP), "no attribute, or all of them")
					require.Equal(t, "application/json", *m.AMQP.Properties.ContentType)
					require.Equal(t, string(w.Payload), string(m.AMQP.GetData()))
					dropped++
				}
				require.NoError(t, msg.Finish(nil))
			}
			if dropped > 0 {
				require.Equal(t, len(want), dropped, "RabbitMQ converts every message alike")
				t.Logf("RabbitMQ delivered ferry's binary-mode CloudEvents to an AMQP 1.0 receiver without their "+
					"headers (no application properties): the SDK read no CloudEvent from %d messages", dropped)
			} else {
				t.Logf("RabbitMQ delivered ferry's binary-mode headers to an AMQP 1.0 receiver as application " +
					"properties: the SDK read every CloudEvent")
			}
		})
	}
}

// Events of another service, written by the SDK's AMQP binding, in binary
// and in structured mode, one of them twice, reach a queue. Structured:
// the SDK's AMQP 1.0 sender sends them. Binary: the application properties
// the binding writes are published as 0-9-1 headers (after a message sent
// through AMQP 1.0 shows what RabbitMQ does with them). ferry's consumer
// reads them with the Decoding and its handler applies each through the
// Inbox once: the copy of the CloudEvent with the same id, and the
// redelivery of one whose ack was lost, are duplicates.
func TestAMQPSDKProducerToInbox(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			url := amqp10URL(t)
			b := newInbox(t)
			ctx := testsvc.Context(t, waitLong)
			conn := testsvc.RabbitMQ(t)
			q := testsvc.RabbitMQQueue(t, conn, "quorum", nil)
			ch, err := conn.Channel()
			require.NoError(t, err)
			defer ch.Close()
			_, err = ch.QueueDeclare(q.Name+".parking", true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
			require.NoError(t, err)
			testsvc.DeleteRabbitMQQueue(t, q.Name+".parking")
			events := sdkEvents(t, 3)
			sends := append(events, events[0])

			if mode == ferrycloudevents.Structured {
				s := sdkSender(t, url, q.Name)
				for _, e := range sends {
					require.NoError(t, s.Send(forceMode(ctx, mode), binding.ToMessage(&e)))
				}
			} else {
				binaryThroughAMQP10(t, ctx, url, conn)
				require.NoError(t, ch.Confirm(false))
				for _, e := range sends {
					var m amqp1.Message
					require.NoError(t, ceamqp.WriteMessage(forceMode(ctx, mode), binding.ToMessage(&e), &m))
					require.NotEmpty(t, ceProperties(&m), "the SDK writes binary mode")
					h := amqp.Table{}
					for k, v := range m.ApplicationProperties {
						h[k] = v
					}
					dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q.Name, true, false, amqp.Publishing{
						ContentType: *m.Properties.ContentType, Headers: h, Body: m.GetData(), DeliveryMode: amqp.Persistent})
					require.NoError(t, err)
					ok, err := dc.WaitContext(ctx)
					require.NoError(t, err)
					require.True(t, ok)
				}
			}

			b.loseAckOf(events[1].ID())
			c, err := ferryamqp.DialConsumer(url, q.Name, b.handler(orderOfPayload), &ferryamqp.ConsumerConfig{
				Prefetch: 4, ConsumerOptions: ferrybroker.ConsumerOptions{Concurrency: 2, Decoding: ferrycloudevents.Decoding{},
					Redelivery: ferrybroker.RedeliveryPolicy{RetryDelay: 20 * time.Millisecond}}})
			require.NoError(t, err)
			require.NoError(t, c.Start(ctx))
			t.Cleanup(func() { _ = c.Stop(context.Background()) })
			b.wait(t, 3, 2, c.Stats, 4)
			require.NoError(t, c.Stop(ctx))
			b.checkApplied(t, wantOrders(t, events))
			// The binding writes time as an AMQP timestamp, a 0-9-1 timestamp
			// header, which ferry's consumer does not take (it reads string
			// headers only): the time attribute is lost on the way in binary
			// mode.
			b.checkDecoded(t, events, mode == ferrycloudevents.Structured)
		})
	}
}

// binaryThroughAMQP10 sends a binary-mode CloudEvent through the SDK's
// AMQP 1.0 sender and checks that a 0-9-1 consumer gets its attributes as
// headers or (RabbitMQ 3.x) the application properties as one header,
// AMQP 1.0-encoded, and none of them alone; it logs which.
func binaryThroughAMQP10(t *testing.T, ctx context.Context, url string, conn *amqp.Connection) {
	t.Helper()
	q := testsvc.RabbitMQQueue(t, conn, "quorum", nil)
	e := sdkEvents(t, 1)[0]
	require.NoError(t, sdkSender(t, url, q.Name).Send(binding.WithForceBinary(ctx), binding.ToMessage(&e)))
	d := testsvc.ReadRabbitMQQueue(t, conn, q.Name, 1, waitLong)[0]
	require.Equal(t, "application/json", d.ContentType, "the content type crosses")
	if id, ok := d.Headers[ferrycloudevents.AMQPPrefix+"id"]; ok {
		require.Equal(t, e.ID(), id)
		t.Logf("RabbitMQ delivered the SDK's binary-mode application properties over 0-9-1 as headers")
		return
	}
	blob, ok := d.Headers["x-amqp-1.0-app-properties"]
	require.True(t, ok, "the application properties are nowhere: headers %v", d.Headers)
	require.Contains(t, fmt.Sprint(blob), e.ID(), "the section holds the attributes, encoded")
	for k := range d.Headers {
		require.False(t, strings.HasPrefix(k, ferrycloudevents.AMQPPrefix), "header %s", k)
	}
	t.Logf("RabbitMQ delivered the SDK's binary-mode application properties over 0-9-1 as one header, " +
		"x-amqp-1.0-app-properties, AMQP 1.0-encoded: ferry's consumer reads no CloudEvent from them")
}

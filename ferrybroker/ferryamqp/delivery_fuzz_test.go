package ferryamqp

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry/ferrybroker"
)

// headerValue turns fuzz input into one AMQP table value of a kind the
// wire format can carry.
func headerValue(kind byte, n uint64, s string) any {
	switch kind % 14 {
	case 0:
		return s
	case 1:
		return []byte(s)
	case 2:
		return int64(n)
	case 3:
		return int32(n)
	case 4:
		return int16(n)
	case 5:
		return int8(n)
	case 6:
		return n
	case 7:
		return uint32(n)
	case 8:
		return uint16(n)
	case 9:
		return uint8(n)
	case 10:
		return math.Float64frombits(n)
	case 11:
		return amqp.Table{s: int64(n)}
	case 12:
		return []any{s, int64(n)}
	}
	return nil
}

// FuzzDelivery converts what a publisher other than ferry can put in a
// message's headers, x-delivery-count included (RabbitMQ sets it only on
// quorum queues; on a classic queue it is whatever the publisher sent). The
// conversion never panics, keeps only string headers, and gives a delivery
// count of at least 1 for a first delivery and never a negative one (0 is
// "unknown").
func FuzzDelivery(f *testing.F) {
	le := func(n uint64) []byte { return binary.LittleEndian.AppendUint64(nil, n) }
	f.Add("x-delivery-count", byte(2), le(3), "", false, "id")
	f.Add("x-delivery-count", byte(2), le(math.MaxInt64), "", true, "id")
	f.Add("x-delivery-count", byte(6), le(math.MaxUint64), "", true, "")
	f.Add("x-delivery-count", byte(2), le(1<<63), "", false, "")
	f.Add("Ferry-Sequence", byte(0), le(0), "-1", true, "id")
	f.Add("Ferry-Event-Id", byte(1), le(0), "\xff\x00", false, "")
	f.Fuzz(func(t *testing.T, key string, kind byte, raw []byte, s string, redelivered bool, id string) {
		var n uint64
		if len(raw) >= 8 {
			n = binary.LittleEndian.Uint64(raw)
		}
		c := &Consumer{fails: newFailCounts(10)}
		c.fails.inc(id)
		d := &amqp.Delivery{MessageId: id, Redelivered: redelivered, Body: raw,
			Headers: amqp.Table{key: headerValue(kind, n, s), "x-delivery-count": headerValue(kind, n, s)}}
		fd, _, _ := c.delivery(d)
		if fd.DeliveryCount < 0 || (!redelivered && fd.DeliveryCount < 1) {
			t.Fatalf("delivery count %d from headers %v", fd.DeliveryCount, d.Headers)
		}
		for k, v := range d.Headers {
			switch v := v.(type) {
			case string:
				if fd.Headers[k] != v {
					t.Fatalf("string header %q lost", k)
				}
			case []byte:
				if fd.Headers[k] != string(v) {
					t.Fatalf("bytes header %q lost", k)
				}
			default:
				if _, ok := fd.Headers[k]; ok {
					t.Fatalf("header %q of type %T kept as a string", k, v)
				}
			}
		}
		policy := ferrybroker.RedeliveryPolicy{MaxDeliveries: 5, RetryDelay: time.Millisecond, MaxRetryDelay: time.Second}
		if delay := policy.Delay(fd.DeliveryCount); delay < 0 || delay > 2*time.Second {
			t.Fatalf("retry delay %s for delivery count %d", delay, fd.DeliveryCount)
		}
	})
}

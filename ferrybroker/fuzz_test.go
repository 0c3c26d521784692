package ferrybroker_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/ferrybroker"
)

// FuzzCheckDelivery feeds CheckDelivery and FillFromHeaders what a broker
// can hand a consumer from any publisher: any content type, payload and
// ferry headers. They never panic; a refusal always wraps ErrMalformed; a
// JSON message is refused exactly when its payload is not JSON.
func FuzzCheckDelivery(f *testing.F) {
	f.Add("application/json", []byte(`{"order":1}`), "01J", "OrderPaid", "order", "1", "3")
	f.Add("", []byte(`not json`), "", "", "", "", "")
	f.Add("application/cloudevents+json; charset=utf-8", []byte(`[1,2`), "id", "t", "a", "b", "-9223372036854775808")
	f.Add("text/plain", []byte{0xff, 0xfe}, "\x00", "\xff", "", "", "99999999999999999999")
	f.Add(" APPLICATION/JSON ;x", []byte(`"s"`), "", "", "", "", "1e3")
	f.Fuzz(func(t *testing.T, contentType string, payload []byte, id, typ, aggType, seq, count string) {
		d := &ferrybroker.Delivery{Payload: payload, Headers: map[string]string{
			ferrybroker.HeaderEventID: id, ferrybroker.HeaderEventType: typ,
			ferrybroker.HeaderAggregateType: aggType, ferrybroker.HeaderSequence: seq,
		}}
		d.FillFromHeaders()
		if d.MessageID != id || d.Type != typ || d.AggregateType != aggType {
			t.Fatalf("FillFromHeaders: %+v from headers %v", d, d.Headers)
		}
		if n, err := strconv.ParseInt(seq, 10, 64); (err == nil && d.Sequence != n) || (err != nil && d.Sequence != 0) {
			t.Fatalf("sequence header %q gave %d", seq, d.Sequence)
		}
		validate := ferrybroker.RequireHeaders(ferrybroker.HeaderEventID, ferrybroker.HeaderEventType)
		err := ferrybroker.CheckDelivery(contentType, d, validate)
		if err != nil && !errors.Is(err, ferrybroker.ErrMalformed) {
			t.Fatalf("refusal %v does not wrap ErrMalformed", err)
		}
		ct := strings.ToLower(strings.TrimSpace(strings.Split(contentType, ";")[0]))
		isJSON := ct == "" || ct == "application/json" || strings.HasSuffix(ct, "+json")
		bad := (isJSON && !json.Valid(payload)) || id == "" || typ == ""
		if bad != (err != nil) {
			t.Fatalf("content type %q, payload %q, id %q, type %q: error %v", contentType, payload, id, typ, err)
		}
	})
}

// FuzzRedeliveryPolicyDelay checks that a delivery count from a header (a
// publisher can set x-delivery-count on a classic queue) cannot make the
// retry delay hang, overflow or leave its bounds.
func FuzzRedeliveryPolicyDelay(f *testing.F) {
	f.Add(int64(time.Second), int64(time.Minute), 3)
	f.Add(int64(0), int64(time.Minute), 1<<62)
	f.Add(int64(1), int64(1<<62), -5)
	f.Add(int64(1<<61), int64(1<<62), 1<<40)
	f.Fuzz(func(t *testing.T, retry, max int64, count int) {
		p := ferrybroker.RedeliveryPolicy{MaxDeliveries: 5, RetryDelay: time.Duration(retry), MaxRetryDelay: time.Duration(max)}
		if p.Validate() != nil {
			return
		}
		done := make(chan time.Duration, 1)
		go func() { done <- p.Delay(count) }()
		select {
		case d := <-done:
			if d < 0 || float64(d) > 1.2*float64(p.MaxRetryDelay)+1 {
				t.Fatalf("Delay(%d) = %s with %+v", count, d, p)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Delay(%d) with %+v does not return", count, p)
		}
	})
}

package ferryhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ferrydev/ferry/ferryhttp"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// BenchmarkPayment measures what the middleware costs a request: the same
// payment (a row, an outbox event, a JSON answer, one transaction) without
// a key (the baseline: the handler in a transaction, nothing stored), with
// a new key each time (claim, then the response stored in the transaction),
// and replayed with one key, one request at a time, on each store. The
// ratios to the baseline of the same run are logged.
func BenchmarkPayment(b *testing.B) {
	for _, kind := range testsvc.Kinds {
		b.Run(kind, func(b *testing.B) {
			bd := newBed(b, kind)
			srv := httptest.NewServer(bd.handler(bd.newKeys(b, func(c *ferryhttp.Config) { c.Optional = true })))
			defer srv.Close()
			body := `{"order_id":"o-1","amount":10}`
			rates := map[string]float64{}
			for _, c := range []struct {
				name string
				key  func(i int) string
			}{
				{"no-key", func(int) string { return "" }},
				{"new-key", func(i int) string { return fmt.Sprint("k-", i) }},
				{"replay", func(int) string { return "same" }},
			} {
				b.Run(c.name, func(b *testing.B) {
					i := 0
					for b.Loop() {
						r, err := send(srv.URL, c.key(i), body)
						if err != nil || r.Status != http.StatusCreated {
							b.Fatalf("%v %d %s", err, r.Status, r.Body)
						}
						i++
					}
					rates[c.name] = float64(b.N) / b.Elapsed().Seconds()
					b.ReportMetric(rates[c.name], "req/s")
				})
			}
			if base := rates["no-key"]; base > 0 {
				b.Logf("%s: new key / no key = %.2f, replay / no key = %.2f", kind, rates["new-key"]/base, rates["replay"]/base)
			}
		})
	}
}

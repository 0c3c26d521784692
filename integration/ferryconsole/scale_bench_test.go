package ferryconsole_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferryconsole"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// scaleMix is the DEAD events of BenchmarkDeadAtScale: row i of kind
// i % 20, so that 60% fail on a missing stream of orders.paid (the group
// retried and discarded), 25% on a timeout of it, 10% on a quota of
// orders.shipped and 5%, without destination, on a missing stream. Each
// carries a payload of 1 KiB, as the rows of a real outbox do.
var scaleMix = func() []testsvc.DeadKind {
	payload := `{"order":{"id":"{n}","pad":"` + strings.Repeat("x", 1000) + `"}}`
	var kinds []testsvc.DeadKind
	for i := 0; i < 20; i++ {
		k := testsvc.DeadKind{Destination: "orders.paid", Payload: payload,
			Error: `attempt 20: returned: nats: no stream matches subject "orders.paid.{n}"`}
		switch {
		case i >= 19:
			k = testsvc.DeadKind{Type: "OrderRefunded", Payload: payload, Error: `attempt 3: returned: nats: no stream matches subject "x.{n}"`}
		case i >= 17:
			k = testsvc.DeadKind{Destination: "orders.shipped", Payload: payload, Error: "attempt 20: payload 100% over quota_limit ({n} bytes)"}
		case i >= 12:
			k = testsvc.DeadKind{Destination: "orders.paid", Payload: payload, Error: "attempt 20: dial tcp 10.0.{m}.7:4222: i/o timeout after 30s"}
		}
		kinds = append(kinds, k)
	}
	return kinds
}()

// BenchmarkDeadAtScale measures the console and the bulk actions over an
// outbox of N DEAD events (FERRY_BENCH_DEAD, default 10000,100000,1000000;
// SQLite up to 100,000), on each database: the overview page, the groups
// page, the first page of the DEAD listing, and the retry and the discard
// of the largest group (60% of N), through ferryadmin as the console and
// ferry dead do once confirmed: a dry run (the confirmation's count), then
// the action bound to its instant, and the overview right after it. Each is run once (-benchtime 1x); besides
// ns/op it reports the cost per DEAD event (µs/event, of N for a page, of
// the group for an action), which stays flat from 10,000 to 1,000,000
// when nothing walks or sorts every event:
//
//	go test -run '^$' -bench BenchmarkDeadAtScale -benchtime 1x -timeout 2h ./integration/ferryconsole/
func BenchmarkDeadAtScale(b *testing.B) {
	sizes := []int{10_000, 100_000, 1_000_000}
	if v := os.Getenv("FERRY_BENCH_DEAD"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 20 || n > 1_000_000 {
				b.Fatalf("FERRY_BENCH_DEAD: %q is not a size within 20..1000000", f)
			}
			sizes = append(sizes, n)
		}
	}
	for _, kind := range testsvc.Kinds {
		for _, n := range sizes {
			if kind == "sqlite" && n > 100_000 {
				continue
			}
			b.Run(fmt.Sprintf("%s/%d", kind, n), func(b *testing.B) { benchDeadAtScale(b, kind, n) })
		}
	}
}

func benchDeadAtScale(b *testing.B, kind string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	st := testsvc.Store(b, kind)
	start := time.Now()
	testsvc.InsertDead(b, st, n, scaleMix...)
	analyze(ctx, b, st)
	b.Logf("%d DEAD events written in %s", n, time.Since(start).Round(time.Millisecond))
	a := st.Driver
	h, err := ferryconsole.New(ferryconsole.Config{
		Outboxes:     map[string]ferrystore.Admin{"orders": a},
		Authenticate: ferryconsole.BasicAuth(testUser, testPassword),
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		RunTimeout:   30 * time.Minute,
	})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	group := ferryadmin.DeadFilter{Destination: "orders.paid", ErrorClass: ferryadmin.ErrorClass(scaleMix[0].Error)}
	size := int64(0)
	for i := 0; i < n; i++ {
		if i%20 < 12 {
			size++
		}
	}
	get := func(b *testing.B, path, want string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/"+path, nil)
		req.SetBasicAuth(testUser, testPassword)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK {
			b.Fatalf("GET /%s: %d %v\n%s", path, res.StatusCode, err, body)
		}
		if !strings.Contains(string(body), want) {
			b.Fatalf("GET /%s does not say %q", path, want)
		}
	}
	page := func(path, want string) func(b *testing.B) {
		return func(b *testing.B) {
			for b.Loop() {
				get(b, path, want)
			}
			perEvent(b, int64(n))
		}
	}
	b.Run("overview", page("", strconv.Itoa(n)))
	b.Run("groups", page("outbox/orders/groups", strconv.FormatInt(size, 10)))
	b.Run("dead", page("outbox/orders/dead", "dead-000000"))
	// The confirmation page's count: a dry run of the group's retry.
	var at time.Time
	b.Run("dry-run", func(b *testing.B) {
		for b.Loop() {
			res, err := ferryadmin.RetryDead(ctx, a, ferryadmin.BulkOptions{Filter: group, DryRun: true})
			if err != nil {
				b.Fatal(err)
			}
			if res.Matched != size {
				b.Fatalf("the dry run counted %d of the group's %d events", res.Matched, size)
			}
			at = res.At
		}
		perEvent(b, size)
	})
	// The action as confirmed (bound to the dry run's instant); then, with
	// the timer stopped, the overview behind what it did (for a retry, a
	// backlog of the group's events), reported as overview-after-ms.
	confirmed := group
	confirmed.DiedBy = at
	act := func(name string, run func() (ferryadmin.BulkResult, error), reset string) {
		b.Run(name, func(b *testing.B) {
			var after time.Duration
			for b.Loop() {
				res, err := run()
				if err != nil {
					b.Fatal(err)
				}
				if res.Changed != size || !res.Complete {
					b.Fatalf("%s changed %d of the group's %d events (complete %v)", name, res.Changed, size, res.Complete)
				}
				b.StopTimer()
				start := time.Now()
				get(b, "", "orders")
				after += time.Since(start)
				if _, err := st.DB.ExecContext(ctx, reset); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			perEvent(b, size)
			b.ReportMetric(float64(after.Milliseconds())/float64(b.N), "overview-after-ms")
		})
	}
	// The reset makes the group DEAD again, as it died: available_at is
	// its death, before the dry run's instant.
	table := st.Driver.Table()
	act("retry-group", func() (ferryadmin.BulkResult, error) {
		return ferryadmin.RetryDead(ctx, a, ferryadmin.BulkOptions{Filter: confirmed})
	}, "UPDATE "+table+" SET status = 'DEAD', available_at = created_at WHERE status = 'NEW'")
	act("discard-group", func() (ferryadmin.BulkResult, error) {
		return ferryadmin.DiscardDead(ctx, a, ferryadmin.BulkOptions{Filter: confirmed}, "bench", "bench@test")
	}, "UPDATE "+table+" SET status = 'DEAD', discarded_at = NULL, discard_reason = NULL WHERE status = 'DISCARDED'")
}

// analyze updates the planner's statistics after a bulk load, as autovacuum
// and InnoDB's background statistics do on a live table.
func analyze(ctx context.Context, b *testing.B, st testsvc.SQLStore) {
	q := "ANALYZE " + st.Driver.Table()
	switch st.Kind {
	case "mysql":
		q = "ANALYZE TABLE " + st.Driver.Table()
	case "postgres":
		q = "VACUUM ANALYZE " + st.Driver.Table()
	}
	rows, err := st.DB.QueryContext(ctx, q)
	if err != nil {
		b.Fatal(err)
	}
	rows.Close()
}

// perEvent reports the time of one operation per event of events.
func perEvent(b *testing.B, events int64) {
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(events), "µs/event")
}

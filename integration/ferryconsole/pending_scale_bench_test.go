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
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// backlogMix is the NEW events of BenchmarkBacklogAtScale: row i of kind
// i % 20, so that 60% wait for orders.paid, 25% for orders.shipped, 10%
// for orders.paid after 3 failed attempts and 5%, without destination,
// after one. Each carries a payload of 1 KiB.
var backlogMix = func() []testsvc.PendingKind {
	payload := `{"order":{"id":"1","pad":"` + strings.Repeat("x", 1000) + `"}}`
	var kinds []testsvc.PendingKind
	for i := 0; i < 20; i++ {
		k := testsvc.PendingKind{Destination: "orders.paid", Payload: payload}
		switch {
		case i >= 19:
			k = testsvc.PendingKind{Type: "OrderRefunded", Payload: payload, Attempts: 1, Error: "attempt 1: returned: no stream"}
		case i >= 17:
			k = testsvc.PendingKind{Destination: "orders.paid", Payload: payload, Attempts: 3, Error: "attempt 3: i/o timeout"}
		case i >= 12:
			k = testsvc.PendingKind{Destination: "orders.shipped", Payload: payload}
		}
		kinds = append(kinds, k)
	}
	return kinds
}()

// BenchmarkBacklogAtScale measures what on-call opens behind a backlog:
// the console's overview page and ferry status (ferryadmin.Status with the
// command's defaults), and each statement of theirs, over an outbox of N
// NEW events of 1 KiB (FERRY_BENCH_PENDING, default 1000000; SQLite up to
// 100,000) beside FERRY_BENCH_PENDING_DEAD DEAD ones (default 0), on each
// database (FERRY_BENCH_KINDS, default all), in that order: the overview
// pays for a cache the load left cold. Each is run once (-benchtime 1x):
//
//	FERRY_REQUIRE_SERVICES=1 go test -run '^$' -bench BenchmarkBacklogAtScale -benchtime 1x -timeout 2h ./integration/ferryconsole/
func BenchmarkBacklogAtScale(b *testing.B) {
	sizes := benchSizes(b, "FERRY_BENCH_PENDING", "1000000")
	dead := benchSizes(b, "FERRY_BENCH_PENDING_DEAD", "0")[0]
	kinds := testsvc.Kinds
	if v := os.Getenv("FERRY_BENCH_KINDS"); v != "" {
		kinds = strings.Split(v, ",")
	}
	for _, kind := range kinds {
		for _, n := range sizes {
			if kind == "sqlite" && n > 100_000 {
				continue
			}
			b.Run(fmt.Sprintf("%s/%d+%d", kind, n, dead), func(b *testing.B) { benchBacklogAtScale(b, kind, n, dead) })
		}
	}
}

func benchSizes(b *testing.B, env, def string) []int {
	v := os.Getenv(env)
	if v == "" {
		v = def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n > 1_000_000 {
			b.Fatalf("%s: %q is not a size within 0..1000000", env, f)
		}
		out = append(out, n)
	}
	return out
}

func benchBacklogAtScale(b *testing.B, kind string, n, dead int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	st := testsvc.Store(b, kind)
	start := time.Now()
	testsvc.InsertPending(b, st, testsvc.PendingRows{N: n, Kinds: backlogMix})
	if dead > 0 {
		testsvc.InsertDead(b, st, dead, scaleMix...)
	}
	testsvc.Analyze(b, st)
	b.Logf("%d NEW and %d DEAD events written in %s", n, dead, time.Since(start).Round(time.Millisecond))
	a := st.Driver
	h, err := ferryconsole.New(ferryconsole.Config{
		Outboxes:     map[string]ferrystore.Admin{"orders": a},
		Authenticate: ferryconsole.BasicAuth(testUser, testPassword),
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		QueryTimeout: 10 * time.Minute,
	})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	step := func(name string, run func() error) {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := run(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
		})
	}
	step("overview", func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/", nil)
		req.SetBasicAuth(testUser, testPassword)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK || !strings.Contains(string(body), strconv.Itoa(n)) {
			return fmt.Errorf("GET /: %d %v", res.StatusCode, err)
		}
		return nil
	})
	step("status", func() error { // ferry status's defaults
		_, err := ferryadmin.Status(ctx, a, nil)
		return err
	})
	step("Stats", func() error { _, err := a.Stats(ctx); return err })
	step("CountByStatus", func() error { _, err := a.CountByStatus(ctx, ferrytype.StatusDiscarded); return err })
	step("PendingByDestination", func() error { _, err := a.PendingByDestination(ctx, 50); return err })
	step("Attempts", func() error { _, err := a.Attempts(ctx); return err })
	step("DeadByDestination", func() error { _, err := a.DeadByDestination(ctx, ferrystore.MaxListLimit); return err })
	// What ferry status read for the pending events that failed, and
	// what it reads now (the stores of this repository have it).
	step("ListFailedPending", func() error {
		_, err := a.List(ctx, ferrystore.Filter{Failed: true, Statuses: []ferrytype.Status{ferrytype.StatusNew, ferrytype.StatusSending},
			Limit: 6})
		return err
	})
	if pf, ok := a.(interface {
		PendingFailures(ctx context.Context, limit int) ([]ferrystore.Row, error)
	}); ok {
		step("PendingFailures", func() error { _, err := pf.PendingFailures(ctx, 5); return err })
	}
}

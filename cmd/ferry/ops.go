package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferryotel"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// opsHandler serves the daemon's operational endpoints:
//
//	/metrics  Prometheus metrics of the relay, the outbox table and the process
//	/healthz  200 while the process runs
//	/readyz   200 when the database answers, the outbox table is migrated and
//	          the broker is connected; 503 otherwise, naming the cause
//
// It serves from the start: before the database and the broker are open,
// /readyz says which is missing.
func opsHandler(reg *prometheus.Registry, deps *relayDeps, timeout time.Duration) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ready, checks := readiness(r.Context(), deps, timeout)
		w.Header().Set("Content-Type", "application/json")
		status := "ready"
		if !ready {
			status = "unready"
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(struct {
			Status string                 `json:"status"`
			Checks map[string]checkResult `json:"checks"`
		}{status, checks})
	})
	return mux
}

type checkResult struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	Note  string `json:"note,omitempty"`
}

// relayDeps is what the relay daemon has opened so far, and why the rest
// is not there yet: /readyz and ferry_broker_connected read it while the
// relay starts and runs.
type relayDeps struct {
	mu         sync.Mutex
	store      ferrystore.Admin
	dbErr      error // the last failure to open the database
	schemaErr  error // why the outbox table cannot be used (nil once it can)
	schemaNote string
	pub        ferrybroker.Publisher
	brokerErr  error // the last failure to connect to the broker
}

func (d *relayDeps) setStore(s ferrystore.Admin, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.store, d.dbErr = s, err
}

func (d *relayDeps) setSchema(err error, note string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.schemaErr, d.schemaNote = err, note
}

func (d *relayDeps) setPublisher(p ferrybroker.Publisher, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pub, d.brokerErr = p, err
}

// connectedReporter is a publisher that knows, without a round trip,
// whether its connection is up (false while it is down or blocked).
type connectedReporter interface{ Connected() bool }

// brokerConnected reports whether the publisher is open and, when it can
// tell, connected. It does not touch the network.
func (d *relayDeps) brokerConnected() bool {
	d.mu.Lock()
	pub := d.pub
	d.mu.Unlock()
	if pub == nil {
		return false
	}
	if c, ok := pub.(connectedReporter); ok {
		return c.Connected()
	}
	return true
}

// readiness asks the database and the broker, concurrently, each within
// timeout. A publisher that cannot be asked (no ferrybroker.Checker)
// counts as ready once open, and says so.
func readiness(ctx context.Context, deps *relayDeps, timeout time.Duration) (bool, map[string]checkResult) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deps.mu.Lock()
	store, dbErr, schemaErr, schemaNote := deps.store, deps.dbErr, deps.schemaErr, deps.schemaNote
	pub, brokerErr := deps.pub, deps.brokerErr
	deps.mu.Unlock()
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		checks = map[string]checkResult{}
	)
	fail := func(err error) checkResult {
		return checkResult{Error: ferrytype.RedactURL(err.Error())}
	}
	set := func(name string, res checkResult) {
		mu.Lock()
		checks[name] = res
		mu.Unlock()
	}
	run := func(name string, fn func(context.Context) error, note string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := fn(ctx)
			res := checkResult{OK: err == nil, Note: note}
			if err != nil {
				res = fail(err)
			}
			set(name, res)
		}()
	}
	switch {
	case store == nil && dbErr != nil:
		set("database", fail(fmt.Errorf("database not open: %w", dbErr)))
	case store == nil:
		set("database", fail(errors.New("database not open yet")))
	case schemaErr != nil:
		set("database", fail(schemaErr))
	default:
		run("database", store.Ping, schemaNote)
	}
	c, canCheck := pub.(ferrybroker.Checker)
	switch {
	case pub == nil && brokerErr != nil:
		set("broker", fail(fmt.Errorf("broker not connected: %w", brokerErr)))
	case pub == nil:
		set("broker", fail(errors.New("broker not connected yet")))
	case canCheck || !deps.brokerConnected():
		connected := deps.brokerConnected()
		run("broker", func(ctx context.Context) error {
			if canCheck {
				if err := c.Check(ctx); err != nil {
					return fmt.Errorf("broker not connected: %w", err)
				}
			}
			if !connected {
				return errors.New("broker not connected: the publisher reports its connection down or blocked")
			}
			return nil
		}, "")
	default:
		set("broker", checkResult{OK: true, Note: "this publisher cannot be checked"})
	}
	wg.Wait()
	ready := true
	for _, c := range checks {
		ready = ready && c.OK
	}
	return ready, checks
}

// opsServer is the daemon's HTTP server.
type opsServer struct {
	srv  *http.Server
	addr string
	done chan error
}

// startOps listens on addr at once, so that a taken port fails the start,
// and serves h in the background.
func startOps(addr string, h http.Handler, log *slog.Logger) (*opsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http-addr %s: %w", addr, err)
	}
	s := &opsServer{
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		addr: ln.Addr().String(),
		done: make(chan error, 1),
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	log.Info("serving /metrics, /healthz and /readyz", "addr", s.addr)
	return s, nil
}

// Stop ends the server, letting requests in progress finish within ctx.
func (s *opsServer) Stop(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// setupTracing exports the relay's publish spans with OTLP over HTTP when
// the standard variables ask for it: OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, OTEL_SDK_DISABLED not true. The
// exporter, the sampler (OTEL_TRACES_SAMPLER), the batching (OTEL_BSP_*)
// and the resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) read
// their own variables. It returns nil when tracing is off, and a function
// that flushes and stops the exporter.
func setupTracing(ctx context.Context, system string, log *slog.Logger) (*ferryotel.Tracing, func(context.Context) error, error) {
	off := func(context.Context) error { return nil }
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") ||
		(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "") {
		return nil, off, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, off, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	// Later detectors win: the variables override the default name.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "ferry-relay")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		log.Warn("tracing: incomplete resource", "error", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	log.Info("tracing: exporting publish spans with OTLP/HTTP")
	return ferryotel.New(&ferryotel.Config{TracerProvider: tp, System: system}), tp.Shutdown, nil
}

package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferryprom"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
)

// The relay daemon starts in this order, so that a Kubernetes probe always
// has an answer: the HTTP endpoints (/healthz 200, /readyz 503 naming what
// is missing, /metrics with ferry_broker_connected 0), the database (then
// the outbox gauges), the outbox table's schema, the broker, the relay.
// Without --drain and without an explicit --connect-timeout it waits for
// each as long as it runs, instead of exiting into a crash loop.

// foreverWait is the connect timeout of a daemon that waits as long as it
// runs.
const foreverWait = -1

// connectWait is how long the relay tries to reach the database and the
// broker: --connect-timeout with --drain or when set explicitly (flag,
// variable or config file), else as long as it runs.
func connectWait(g *globals, f *relayFlags) time.Duration {
	if f.drain {
		return f.connectTimeout
	}
	for _, s := range g.settings {
		if (s.key == "connect_timeout" || strings.HasSuffix(s.key, ".connect_timeout")) && s.source != "default" {
			return f.connectTimeout
		}
	}
	return foreverWait
}

// relayOps is the daemon's HTTP side: the registry, the relay's metrics
// and the server.
type relayOps struct {
	reg     *prometheus.Registry
	metrics *ferryprom.Metrics
	srv     *opsServer
	tables  *ferryprom.OutboxCollector
	log     *slog.Logger
}

// startRelayOps serves /metrics, /healthz and /readyz on --http-addr at
// once, before anything is connected: deps says what is open so far.
func startRelayOps(f *relayFlags, deps *relayDeps, broker string, log *slog.Logger) (*relayOps, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := ferryprom.New(reg, nil)
	if err != nil {
		return nil, err
	}
	if err := ferryprom.RegisterBrokerConnected(reg, broker, deps.brokerConnected, nil); err != nil {
		return nil, err
	}
	bi := buildInfo()
	if err := ferryprom.RegisterBuildInfo(reg, ferryprom.BuildInfo{Version: bi.Version, Revision: bi.Revision,
		GoVersion: bi.GoVersion}); err != nil {
		return nil, err
	}
	srv, err := startOps(f.httpAddr, opsHandler(reg, deps, f.readyTimeout), log)
	if err != nil {
		return nil, err
	}
	return &relayOps{reg: reg, metrics: metrics, srv: srv, log: log}, nil
}

// watchOutbox starts the outbox gauges of store, read every
// --metrics-interval; stopOutbox ends them, before the store closes.
func (o *relayOps) watchOutbox(ctx context.Context, f *relayFlags, store ferrystore.Store) error {
	o.metrics.Table(store.Table())
	tables, err := ferryprom.NewOutboxCollector(o.reg, []ferrystore.Store{store}, &ferryprom.OutboxConfig{
		Interval: f.metricsInterval, Timeout: min(5*time.Second, f.metricsInterval/2), Destinations: f.metricsDests,
		Logger: o.log})
	if err != nil {
		return usageError{err}
	}
	if err := tables.Start(ctx); err != nil {
		return err
	}
	o.tables = tables
	return nil
}

// stopOutbox ends the outbox gauges' polling.
func (o *relayOps) stopOutbox(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = o.tables.Stop(sctx)
}

// stop ends the server.
func (o *relayOps) stop(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = o.srv.Stop(sctx)
}

// openRelayStore opens the database, retrying for wait (foreverWait: as
// long as ctx lasts); deps records each failure for /readyz.
func openRelayStore(ctx context.Context, g *globals, wait time.Duration, deps *relayDeps, log *slog.Logger) (ferrystore.Admin, error) {
	return connect(ctx, wait, "database", log, func() (ferrystore.Admin, error) {
		s, err := open.Store(ctx, g.databaseURL, g.table)
		deps.setStore(s, err)
		return s, err
	})
}

// openRelayPublisher connects to the broker, retrying for wait
// (foreverWait: as long as ctx lasts); deps records each failure for
// /readyz and ferry_broker_connected.
func openRelayPublisher(ctx context.Context, url string, bc *open.BrokerConfig, wait time.Duration, deps *relayDeps,
	log *slog.Logger) (ferrybroker.Publisher, error) {
	return connect(ctx, wait, "broker", log, func() (ferrybroker.Publisher, error) {
		p, err := open.Publisher(ctx, url, bc)
		deps.setPublisher(p, err)
		return p, err
	})
}

// awaitSchema checks that the outbox table has every migration this ferry
// embeds. With wait false it returns the first answer: an error wrapping
// ferrytype.ErrSchemaOutdated (exit code exitSchema) when the table is
// missing or behind. With wait true it checks again, 1s then up to every
// 5s, until the table is ready or ctx ends, logging what is missing when
// it changes and once a minute; deps tells /readyz meanwhile. A table
// migrated by a newer ferry is a warning, not a refusal: migrations only
// add, so this relay keeps working with the columns it knows.
func awaitSchema(ctx context.Context, store ferrystore.Store, wait bool, deps *relayDeps, log *slog.Logger) error {
	pause := time.Second
	var last string
	var lastLog time.Time
	for {
		s, err := store.CheckSchema(ctx)
		if err == nil {
			err = s.Err()
		}
		if err == nil {
			deps.setSchema(nil, s.Warning())
			if w := s.Warning(); w != "" {
				log.Warn(w)
			}
			return nil
		}
		deps.setSchema(err, "")
		if !wait || (ctx.Err() != nil) {
			return err
		}
		if msg := err.Error(); msg != last || time.Since(lastLog) >= time.Minute {
			how := "outbox table not ready; the relay starts once it is"
			if !errors.Is(err, ferrytype.ErrSchemaOutdated) {
				how = "cannot check the outbox table; retrying"
			}
			log.Warn(how, "error", err, "check_every", "5s")
			last, lastLog = msg, time.Now()
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(pause*2, 5*time.Second)
	}
}

// validateRelayConfig reports the configuration errors ferry.NewRelay
// would, before the relay waits for anything: a relay that can never start
// exits 2 at once instead of waiting for its database first.
func validateRelayConfig(rc *ferry.RelayConfig) error {
	_, err := ferry.NewRelay(tableOnly{}, struct{ ferrybroker.Publisher }{}, rc)
	return err
}

// tableOnly stands in for a store where only the table's name is asked.
type tableOnly struct{ ferrystore.Store }

func (tableOnly) Table() string { return "" }

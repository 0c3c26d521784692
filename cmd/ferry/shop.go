package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/examples/shop"
	"github.com/ferrydev/ferry/internal/fault"
)

// newShop is the reference system's processes, run by `ferry demo` and the
// chaos harness. Hidden: it is a test bed, not an interface.
func newShop() *cobra.Command {
	cmd := &cobra.Command{Use: "shop", Short: "Run a role of the reference system (for the demo and the chaos harness)", Hidden: true}
	var ordersDB, pointsDB, brokerURL, gatewayURL string
	pf := cmd.PersistentFlags()
	pf.StringVar(&ordersDB, "orders-db", "", "orders database URL")
	pf.StringVar(&pointsDB, "points-db", "", "points database URL")
	pf.StringVar(&brokerURL, "broker-url", "", "broker URL")
	pf.StringVar(&gatewayURL, "gateway", "", "SMS gateway URL")

	setup := &cobra.Command{Use: "setup", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		for _, s := range []struct {
			url string
			fn  func(context.Context, *shop.DB) error
		}{{ordersDB, shop.SetupOrders}, {pointsDB, shop.SetupPoints}} {
			db, err := shop.Open(ctx, s.url)
			if err != nil {
				return err
			}
			err = s.fn(ctx, db)
			db.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}}

	var first, last int64
	var rate, poison, conflict, rollback int
	orders := &cobra.Command{Use: "orders", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		crash, err := fault.FromEnv()
		if err != nil {
			return usageError{err}
		}
		db, err := shop.Open(ctx, ordersDB)
		if err != nil {
			return err
		}
		defer db.Close()
		store, err := db.Outbox("")
		if err != nil {
			return err
		}
		ob, err := ferry.NewOutbox(store, nil)
		if err != nil {
			return err
		}
		// Resume after the last order a previous run created.
		var max sql.NullInt64
		if err := db.QueryRowContext(ctx, db.Q("SELECT MAX(id) FROM shop_order WHERE id BETWEEN ? AND ?"), first, last).Scan(&max); err != nil {
			return err
		}
		from := first
		if max.Valid {
			from = max.Int64 + 1
		}
		svc := &shop.OrderService{DB: db, Outbox: ob, PoisonPct: poison, ConflictPct: conflict, RollbackPct: rollback, FaultPoint: crash}
		statsCtx, stopStats := context.WithCancel(context.Background())
		statsDone := make(chan struct{})
		go func() {
			defer close(statsDone)
			shop.ReportStats(statsCtx, cmd.OutOrStdout(), 200*time.Millisecond, func() shop.Stats {
				return shop.Stats{Role: "orders", Paid: svc.Paid.Load(), UnknownCommits: shop.CommitResets.Load()}
			})
		}()
		paid, err := svc.Place(ctx, from, last, rate)
		stopStats()
		<-statsDone
		fmt.Fprintf(cmd.OutOrStdout(), "orders %d..%d placed, %d paid\n", from, last, paid)
		return err
	}}
	of := orders.Flags()
	of.Int64Var(&first, "first", 1, "first order id")
	of.Int64Var(&last, "last", 100, "last order id")
	of.IntVar(&rate, "rate", 0, "orders per second (0: as fast as possible)")
	of.IntVar(&poison, "poison-pct", 0, "percent of payments announced with an undecodable event")
	of.IntVar(&conflict, "conflict-pct", 0, "percent of payments announced twice with another amount")
	of.IntVar(&rollback, "rollback-pct", 0, "percent of payments rolled back after enqueueing")

	consumer := func(role string) *cobra.Command {
		var conc int
		c := &cobra.Command{Use: role, Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
			crash, err := fault.FromEnv()
			if err != nil {
				return usageError{err}
			}
			return shop.RunConsumer(cmd.Context(), shop.ConsumerOptions{Role: role, DB: pointsDB, BrokerURL: brokerURL,
				GatewayURL: gatewayURL, Concurrency: conc, FaultPoint: crash, Out: cmd.OutOrStdout()})
		}}
		c.Flags().IntVar(&conc, "concurrency", 4, "handlers at once")
		return c
	}

	check := &cobra.Command{Use: "check", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		rep, err := runCheck(ctx, ordersDB, pointsDB, gatewayURL)
		if err != nil {
			return err
		}
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintln(cmd.OutOrStdout(), string(b))
		if !rep.OK() {
			return exitError{exitFailed, fmt.Errorf("check failed: %v", rep.Violations)}
		}
		return nil
	}}
	cmd.AddCommand(setup, orders, consumer("points"), consumer("sms"), check)
	return cmd
}

func runCheck(ctx context.Context, ordersURL, pointsURL, gatewayURL string) (*shop.Report, error) {
	odb, err := shop.Open(ctx, ordersURL)
	if err != nil {
		return nil, err
	}
	defer odb.Close()
	pdb, err := shop.Open(ctx, pointsURL)
	if err != nil {
		return nil, err
	}
	defer pdb.Close()
	var gw shop.GatewayStats
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(gatewayURL + "/stats")
	if err != nil {
		return nil, fmt.Errorf("gateway stats: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&gw); err != nil {
		return nil, fmt.Errorf("gateway stats: %w", err)
	}
	return shop.Check(ctx, odb, pdb, gw)
}

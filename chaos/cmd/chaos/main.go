// Command chaos runs ferry's fault-injection scenarios at full size and
// writes a report (text and JSON).
//
//	cd chaos && go run ./cmd/chaos                       # every scenario, MariaDB and PostgreSQL + RabbitMQ, SQLite + NATS
//	go run ./cmd/chaos -broker kafka -db mysql,postgres  # the Kafka rows (kfake, run by the harness)
//	go run ./cmd/chaos -scenarios kill,pause -db mysql -orders 20000
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ferrydev/ferry/chaos"
	"github.com/ferrydev/ferry/internal/testsvc"
)

func main() {
	var (
		dbs       = flag.String("db", "mysql,postgres,sqlite", "databases: mysql, postgres, sqlite (comma-separated)")
		broker    = flag.String("broker", "amqp", "broker for mysql and postgres: amqp, nats or kafka (sqlite always uses nats)")
		scenarios = flag.String("scenarios", "all", "scenarios to run (comma-separated), or all")
		orders    = flag.Int("orders", 10000, "orders per scenario")
		rate      = flag.Int("rate", 250, "orders per second of each of the two order services")
		report    = flag.String("report", "chaos-report", "report file name, without extension (.txt and .json are written)")
		verbose   = flag.Bool("v", false, "show the processes' output")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "ferry-chaos-bin-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	bin, err := chaos.BuildShop(ctx, dir)
	if err != nil {
		fail(err)
	}
	natsServer := chaos.NATSServer()
	kfake, err := chaos.BuildKfake(ctx, dir)
	if err != nil {
		fail(err)
	}
	var selected []*chaos.Scenario
	if *scenarios == "all" {
		selected = chaos.Scenarios
	} else {
		for _, n := range strings.Split(*scenarios, ",") {
			sc := chaos.ScenarioByName(strings.TrimSpace(n))
			if sc == nil {
				fail(fmt.Errorf("unknown scenario %q", n))
			}
			selected = append(selected, sc)
		}
	}
	var logw io.Writer = io.Discard
	if *verbose {
		logw = os.Stdout
	}
	txt, err := os.Create(*report + ".txt")
	if err != nil {
		fail(err)
	}
	defer txt.Close()
	out := io.MultiWriter(os.Stdout, txt)
	var results []*chaos.Result
	failed := 0
	start := time.Now()
	for _, db := range strings.Split(*dbs, ",") {
		b := *broker
		if db == "sqlite" {
			b = "nats"
		}
		for _, sc := range selected {
			if !sc.Applies(db, b) {
				fmt.Fprintf(out, "== %s on %s + %s: does not apply\n\n", sc.Name, db, b)
				continue
			}
			amqpURL, amqpNode := testsvc.URL(testsvc.EnvAMQP), ""
			if sc.Name == "broker-restart" {
				// It stops RabbitMQ: the tests' own node
				// (scripts/services.sh), never the shared server.
				amqpURL, amqpNode = testsvc.DisruptTarget()
			}
			res, err := chaos.Run(ctx, chaos.Options{
				DB: db, Broker: b, Orders: *orders, Rate: *rate, Bin: bin, KfakeBin: kfake, Out: os.Stdout, Log: logw,
				MySQLURL: testsvc.URL(testsvc.EnvMySQL), PostgresURL: testsvc.URL(testsvc.EnvPostgres),
				NATSURL: testsvc.URL(testsvc.EnvNATS), NATSServer: natsServer, AMQPURL: amqpURL, AMQPNode: amqpNode,
			}, sc)
			if err != nil {
				failed++
				fmt.Fprintf(out, "== %s on %s + %s: ERROR: %v\n\n", sc.Name, db, b, err)
				continue
			}
			results = append(results, res)
			fmt.Fprintln(out, res.String())
			if !res.OK() {
				failed++
			}
		}
	}
	js, _ := chaos.JSON(results)
	if err := os.WriteFile(*report+".json", js, 0o644); err != nil {
		fail(err)
	}
	fmt.Fprintf(out, "%d runs, %d failed, %s; report in %s.txt and %s.json\n", len(results), failed,
		time.Since(start).Round(time.Second), *report, *report)
	if failed > 0 {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "chaos:", err)
	os.Exit(2)
}

package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/chaos/wmflow"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrywatermill"
	"github.com/ferrydev/ferry/internal/faultnet"
	"github.com/ferrydev/ferry/internal/testenv"
)

// The two ways of RunWatermill.
const (
	// WatermillWay is Watermill's own outbox: watermill-sql's publisher in
	// the business transaction through the forwarder's envelope, the
	// forwarder process publishing to RabbitMQ (watermill-amqp, confirms
	// on), a router with the deduplicator middleware (in memory, by UUID)
	// in front of retries, the effect in a transaction of its own.
	WatermillWay = "watermill"
	// FerryWay is ferry's bridge: ferrywatermill's OutboxPublisher in the
	// business transaction, ferry's relay publishing through watermill-amqp
	// (confirms on), a router whose handler is ferrywatermill's
	// RouterHandler over ferry's inbox: marker and effect in one
	// transaction.
	FerryWay = "ferry"
)

// WatermillOptions sizes a RunWatermill.
type WatermillOptions struct {
	// Way is WatermillWay or FerryWay.
	Way string
	// Bin is the wmflow binary (BuildWMFlow).
	Bin string
	// MySQLURL and AMQPURL are the servers (mysql://, amqp://).
	MySQLURL, AMQPURL string
	// Orders is how many orders are placed, one transaction each, over
	// Faults; a tenth of them roll back.
	Orders int
	// Faults is how long faults are injected: every FaultEvery one of a
	// kill -9 of the publishing process (forwarder or relay), a kill -9 of
	// the consumer, a cut of the RabbitMQ connections, a cut of the
	// consumer's database connections, picked by Seed.
	Faults, FaultEvery time.Duration
	Seed               uint64
	// Log receives the processes' output.
	Log io.Writer
}

// WatermillResult is what the checker found: every committed order's
// effect once, none for an order rolled back.
type WatermillResult struct {
	Way                        string
	Committed, RolledBack      int
	Lost, Duplicates, Phantoms int
	Faults                     map[string]int
	Took                       time.Duration
}

// String returns the result on one line.
func (r *WatermillResult) String() string {
	return fmt.Sprintf("%s: %d committed (%d rolled back): %d lost, %d duplicate effects, %d phantom; faults %v, %s",
		r.Way, r.Committed, r.RolledBack, r.Lost, r.Duplicates, r.Phantoms, r.Faults, r.Took.Round(time.Second))
}

// BuildWMFlow builds cmd/wmflow of this module into dir.
func BuildWMFlow(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/ferrydev/ferry/chaos").Output()
	if err != nil {
		return "", fmt.Errorf("find the chaos module: %w", err)
	}
	bin := filepath.Join(dir, "wmflow")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-w", "-o", bin, "./cmd/wmflow")
	build.Dir = strings.TrimSpace(string(out))
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build wmflow: %w", err)
	}
	return bin, nil
}

// wmProc is one wmflow process, started again after a kill.
type wmProc struct {
	name string
	bin  string
	args []string
	log  io.Writer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has exited and been waited for
}

func (p *wmProc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() { _ = cmd.Wait(); close(done) }()
	return nil
}

// kill kills the process group with SIGKILL and waits until the process
// has exited.
func (p *wmProc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// RunWatermill runs the reference flow (an order pays, its points are
// awarded) one way, under faults, then heals, waits until every committed
// order's effect is in or nothing moves for half a minute, and counts
// what the checker finds in the database.
func RunWatermill(ctx context.Context, o WatermillOptions) (*WatermillResult, error) {
	begin := time.Now()
	if o.Log == nil {
		o.Log = io.Discard
	}
	mcfg, err := ferrymysql.ParseURL(o.MySQLURL)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("mysql", mcfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	defer db.Close()

	id := strings.TrimPrefix(testenv.Name(""), "_")
	queue := "wm." + o.Way + "." + id
	orders, effects := "wm_orders_"+id, "wm_effects_"+id
	run := func(q string) error { _, err := db.ExecContext(ctx, q); return err }
	for _, q := range []string{
		"CREATE TABLE " + orders + " (id BIGINT PRIMARY KEY)",
		"CREATE TABLE " + effects + " (n BIGINT AUTO_INCREMENT PRIMARY KEY, order_id BIGINT NOT NULL)",
	} {
		if err := run(q); err != nil {
			return nil, err
		}
	}
	defer func() {
		for _, t := range []string{orders, effects} {
			_ = run("DROP TABLE IF EXISTS " + t)
		}
	}()
	// The queue exists before anything is published to it: watermill-amqp
	// cannot see a message RabbitMQ drops as unroutable.
	if err := declareQueue(o.AMQPURL, queue); err != nil {
		return nil, err
	}
	defer func() { _ = deleteQueue(o.AMQPURL, queue) }()

	// Every process reaches RabbitMQ through one proxy, and the consumer
	// its database through another.
	amqpProxy, amqpURL, err := proxyURL(o.AMQPURL)
	if err != nil {
		return nil, err
	}
	defer amqpProxy.Close()
	dbProxy, err := faultnet.Listen(mcfg.Addr)
	if err != nil {
		return nil, err
	}
	defer dbProxy.Close()
	consumerCfg := mcfg.Clone()
	consumerCfg.Addr = dbProxy.Addr()
	dsn, consumerDSN := mcfg.FormatDSN(), consumerCfg.FormatDSN()

	var publishing, consuming *wmProc
	var publish func(tx *sql.Tx, msg *message.Message) error
	switch o.Way {
	case WatermillWay:
		topic := "wm_fwd_" + id
		// The forwarder's table, created before the first transaction
		// writes to it (watermill-sql cannot create it inside one).
		sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(db), wmflow.SQLSubscriberConfig(), watermill.NopLogger{})
		if err != nil {
			return nil, err
		}
		if err := sub.SubscribeInitialize(topic); err != nil {
			return nil, fmt.Errorf("watermill-sql schema: %w", err)
		}
		_ = sub.Close()
		defer func() {
			_ = run("DROP TABLE IF EXISTS `watermill_" + topic + "`")
			_ = run("DROP TABLE IF EXISTS `watermill_offsets_" + topic + "`")
		}()
		publish = func(tx *sql.Tx, msg *message.Message) error {
			sp, err := wsql.NewPublisher(wsql.TxFromStdSQL(tx), wsql.PublisherConfig{SchemaAdapter: wmflow.SQLSchema()}, watermill.NopLogger{})
			if err != nil {
				return err
			}
			return forwarder.NewPublisher(sp, forwarder.PublisherConfig{ForwarderTopic: topic}).Publish(queue, msg)
		}
		publishing = &wmProc{name: "forwarder", bin: o.Bin, log: o.Log,
			args: []string{"forward", "--db", dsn, "--amqp", amqpURL, "--topic", topic}}
		consuming = &wmProc{name: "consumer", bin: o.Bin, log: o.Log,
			args: []string{"consume", "--mode", "watermill", "--db", consumerDSN, "--amqp", amqpURL, "--queue", queue, "--effects", effects}}
	case FerryWay:
		table, inbox := "wm_outbox_"+id, "wm_in_"+id
		store, err := ferrymysql.New(db, &ferrymysql.Config{Table: table})
		if err != nil {
			return nil, err
		}
		istore, err := ferrymysql.NewInbox(db, &ferrymysql.InboxConfig{MarkerTable: inbox, ConflictTable: inbox + "_c", VersionTable: inbox + "_v"})
		if err != nil {
			return nil, err
		}
		if err := store.Migrate(ctx); err != nil {
			return nil, err
		}
		if err := istore.Migrate(ctx); err != nil {
			return nil, err
		}
		defer func() {
			for _, t := range []string{table, table + "_seq", table + "_relay", inbox, inbox + "_c", inbox + "_v"} {
				_ = run("DROP TABLE IF EXISTS " + t)
			}
			_ = run("DELETE FROM ferry_migration WHERE component IN ('outbox:" + table + "', 'inbox:" + inbox + "')")
		}()
		outbox, err := ferry.NewOutbox(store, nil)
		if err != nil {
			return nil, err
		}
		publish = func(tx *sql.Tx, msg *message.Message) error {
			p, err := ferrywatermill.NewOutboxPublisher(outbox, tx, nil)
			if err != nil {
				return err
			}
			return p.Publish(queue, msg)
		}
		publishing = &wmProc{name: "relay", bin: o.Bin, log: o.Log,
			args: []string{"relay", "--db", dsn, "--amqp", amqpURL, "--table", table}}
		consuming = &wmProc{name: "consumer", bin: o.Bin, log: o.Log,
			args: []string{"consume", "--mode", "ferry", "--db", consumerDSN, "--amqp", amqpURL, "--queue", queue,
				"--effects", effects, "--inbox", inbox}}
	default:
		return nil, fmt.Errorf("unknown way %q", o.Way)
	}
	for _, p := range []*wmProc{publishing, consuming} {
		if err := p.start(); err != nil {
			return nil, err
		}
		defer p.kill()
	}

	res := &WatermillResult{Way: o.Way, Faults: map[string]int{}}
	committed := map[int64]bool{}
	rolledBack := map[int64]bool{}
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		rng := rand.New(rand.NewPCG(o.Seed, 7))
		end := time.Now().Add(o.Faults)
		for time.Now().Before(end) && ctx.Err() == nil {
			time.Sleep(o.FaultEvery/2 + time.Duration(rng.Int64N(int64(o.FaultEvery))))
			switch kind := rng.IntN(4); kind {
			case 0:
				publishing.kill()
				res.Faults["kill "+publishing.name]++
				time.Sleep(300 * time.Millisecond)
				_ = publishing.start()
			case 1:
				consuming.kill()
				res.Faults["kill consumer"]++
				time.Sleep(300 * time.Millisecond)
				_ = consuming.start()
			case 2:
				amqpProxy.Cut()
				res.Faults["cut rabbitmq"]++
				time.Sleep(time.Second)
				amqpProxy.Restore()
			case 3:
				dbProxy.Cut()
				res.Faults["cut consumer db"]++
				time.Sleep(time.Second)
				dbProxy.Restore()
			}
		}
	}()

	// The orders, one transaction each, spread over the faults.
	gap := o.Faults / time.Duration(max(o.Orders, 1))
	rng := rand.New(rand.NewPCG(o.Seed, 11))
	for i := range o.Orders {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		order := int64(i + 1)
		back := rng.IntN(10) == 0
		if err := placeOrder(ctx, db, orders, order, back, publish); err != nil {
			return nil, fmt.Errorf("order %d: %w", order, err)
		}
		if back {
			rolledBack[order] = true
		} else {
			committed[order] = true
		}
		time.Sleep(gap)
	}
	<-faultsDone
	res.Committed, res.RolledBack = len(committed), len(rolledBack)

	// Healed: every process runs, nothing is cut. Wait until every
	// committed order has its effect, or nothing moved for 30 s.
	count := func() (map[int64]int, error) {
		rows, err := db.QueryContext(ctx, "SELECT order_id, COUNT(*) FROM "+effects+" GROUP BY order_id")
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		got := map[int64]int{}
		for rows.Next() {
			var id int64
			var n int
			if err := rows.Scan(&id, &n); err != nil {
				return nil, err
			}
			got[id] = n
		}
		return got, rows.Err()
	}
	var got map[int64]int
	last, lastChange := -1, time.Now()
	for {
		if got, err = count(); err != nil {
			return nil, err
		}
		n := 0
		for _, c := range got {
			n += c
		}
		if n != last {
			last, lastChange = n, time.Now()
		}
		have := 0
		for id := range committed {
			if got[id] > 0 {
				have++
			}
		}
		if have == len(committed) && time.Since(lastChange) > 2*time.Second || time.Since(lastChange) > 30*time.Second {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	for id := range committed {
		switch {
		case got[id] == 0:
			res.Lost++
		case got[id] > 1:
			res.Duplicates += got[id] - 1
		}
	}
	for id, c := range got {
		if !committed[id] {
			res.Phantoms += c
		}
	}
	res.Took = time.Since(begin)
	return res, nil
}

// placeOrder writes an order and publishes its event in one transaction,
// which rolls back when back is set.
func placeOrder(ctx context.Context, db *sql.DB, orders string, order int64, back bool, publish func(*sql.Tx, *message.Message) error) error {
	for attempt := 0; ; attempt++ {
		err := func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+orders+" (id) VALUES (?)", order); err != nil {
				return err
			}
			payload, _ := json.Marshal(wmflow.Order{Order: order, Points: 10})
			if err := publish(tx, message.NewMessage(watermill.NewUUID(), payload)); err != nil {
				return err
			}
			if back {
				return nil // the deferred rollback
			}
			return tx.Commit()
		}()
		if err == nil || attempt == 5 || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond) // a deadlock or a lost connection: the order is tried again
	}
}

// proxyURL starts a proxy to raw's host and returns raw pointing at it.
func proxyURL(raw string) (*faultnet.Proxy, string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", err
	}
	p, err := faultnet.Listen(u.Host)
	if err != nil {
		return nil, "", err
	}
	u.Host = p.Addr()
	return p, u.String(), nil
}

// onChannel runs fn on a channel of a connection of its own to url.
func onChannel(url string, fn func(ch *amqp.Channel) error) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return fn(ch)
}

func declareQueue(url, name string) error {
	return onChannel(url, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(name, true, false, false, false, nil)
		return err
	})
}

func deleteQueue(url, name string) error {
	return onChannel(url, func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(name, false, false, false)
		return err
	})
}

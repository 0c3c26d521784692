package ferry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
)

// Task is a side effect outside the local database — an SMS, a payment
// call, a write to another system — recorded in the business transaction
// and executed afterwards by a TaskWorker.
//
// Tasks live in an outbox table of their own (say "ferry_task"): enqueue
// one with an Outbox on that table, inside the transaction of the business
// change, with the task's idempotency key as the event ID and the task's
// kind as its Type:
//
//	tasks.EnqueueTx(ctx, tx, ferry.Event{ID: "sms:order:42:paid", Type: "SendSMS", Payload: body})
//
// The worker runs it at least once: a crash after the external call and
// before the task is marked done runs it again, with the same Key. Pass Key
// to the external system as its idempotency key, so that it does the work
// once.
type Task struct {
	// Key is the task's idempotency key: its outbox event id.
	Key     string
	Type    string
	Payload []byte
	Headers map[string]string
	// Attempt counts executions of this task, this one included.
	Attempt int
}

// TaskHandler executes one task. Returning nil marks it done. An error
// wrapping ferrytype.ErrPoison makes it DEAD at once; any other error
// retries it with the relay's retry policy, until it is DEAD.
type TaskHandler func(ctx context.Context, t Task) error

// TaskWorkerConfig configures a TaskWorker.
type TaskWorkerConfig struct {
	// Relay drives the claims, leases, retries and dead tasks, as for
	// events. Its PublishTimeout bounds one batch of task executions; its
	// Heartbeat.Broker defaults to "task handlers". A task worker reads
	// its table: Relay.Log.Feed must be nil.
	Relay RelayConfig
	// Concurrency is the number of tasks of one batch executed at once.
	// Default 8.
	Concurrency int
}

// TaskWorker executes the tasks of a task table with handlers, by task
// type: a relay whose "broker" is the handlers. It claims, leases, retries
// and gives up tasks exactly as a Relay does events, and its Start, Stop,
// Run, Drain, Stats and ID behave as the Relay's.
type TaskWorker struct {
	relay *Relay
}

// NewTaskWorker returns a worker that executes the tasks of store (an
// outbox table of tasks) with handlers, by task type, instead of
// publishing them. A task of a type without handler is DEAD at once.
//
// The relay hooks in cfg.Hooks see tasks as they see events, with the task
// table as the table: a done task is sent, a failed execution a rejected
// publish followed by a retry, a task given up DEAD (ferryprom.Metrics
// counts them). To time each execution by task type, wrap the handlers
// (ferryprom.ConsumerMetrics.Tasks).
func NewTaskWorker(store ferrystore.Store, handlers map[string]TaskHandler, cfg *TaskWorkerConfig) (*TaskWorker, error) {
	if nilness.Nil(store) {
		return nil, fmt.Errorf("%w: NewTaskWorker needs a store", ErrInvalidConfig)
	}
	if len(handlers) == 0 {
		return nil, fmt.Errorf("%w: NewTaskWorker needs handlers", ErrInvalidConfig)
	}
	for typ, h := range handlers {
		if h == nil {
			return nil, fmt.Errorf("%w: NewTaskWorker: the handler of task type %q is nil", ErrInvalidConfig, typ)
		}
	}
	var c TaskWorkerConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.Relay.Log.Feed != nil {
		return nil, fmt.Errorf("%w: TaskWorkerConfig.Relay.Log.Feed: a task worker reads its table, not a log", ErrInvalidConfig)
	}
	inner := c.Relay.Retry
	if nilness.Nil(inner) {
		inner = ExponentialBackoff{}
	}
	c.Relay.Retry = poisonIsFinal{inner}
	if c.Relay.Heartbeat.Broker == "" {
		c.Relay.Heartbeat.Broker = "task handlers" // what the heartbeat row shows
	}
	r, err := NewRelay(store, &taskExecutor{handlers: handlers, concurrency: c.Concurrency}, &c.Relay)
	if err != nil {
		return nil, err
	}
	return &TaskWorker{relay: r}, nil
}

// ID returns the worker's id in the heartbeat table (RelayConfig.ID).
func (w *TaskWorker) ID() string { return w.relay.ID() }

// Stats returns the worker's counters: a done task counts as Confirmed, a
// failed execution as Rejected, a task given up as Dead.
func (w *TaskWorker) Stats() RelayStats { return w.relay.Stats() }

// Start starts the worker and returns; stop it with Stop (see Relay.Start).
func (w *TaskWorker) Start(ctx context.Context) error { return w.relay.Start(ctx) }

// Stop stops claiming, lets the executions in flight finish and record
// their outcomes, and returns (see Relay.Stop). Stopping twice is safe.
func (w *TaskWorker) Stop(ctx context.Context) error { return w.relay.Stop(ctx) }

// Run starts the worker and runs it until ctx ends, then stops it (see
// Relay.Run).
func (w *TaskWorker) Run(ctx context.Context) error { return w.relay.Run(ctx) }

// Drain runs the worker until no task is NEW or SENDING, then stops it
// (see Relay.Drain).
func (w *TaskWorker) Drain(ctx context.Context) (DrainResult, error) { return w.relay.Drain(ctx) }

// poisonIsFinal sends poison failures straight to DEAD.
type poisonIsFinal struct{ RetryPolicy }

func (p poisonIsFinal) Next(attempts int, res ferrytype.PublishResult) (time.Duration, bool) {
	if errors.Is(res.Err, ferrytype.ErrPoison) {
		return 0, true
	}
	return p.RetryPolicy.Next(attempts, res)
}

// taskExecutor is a Publisher whose "broker" is the task handlers.
type taskExecutor struct {
	handlers    map[string]TaskHandler
	concurrency int
}

func (e *taskExecutor) Publish(ctx context.Context, msgs []ferrytype.Message) []ferrytype.PublishResult {
	res := make([]ferrytype.PublishResult, len(msgs))
	sem := make(chan struct{}, e.concurrency)
	var wg sync.WaitGroup
	for i := range msgs {
		m := &msgs[i]
		h, ok := e.handlers[m.Type]
		if !ok {
			res[i] = ferrytype.Rejected(ferrytype.Poison(fmt.Errorf("no handler for task type %q", m.Type)))
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := h(ctx, Task{Key: m.ID, Type: m.Type, Payload: m.Payload, Headers: m.Headers, Attempt: m.Attempt})
			switch {
			case err == nil:
				res[i] = ferrytype.Confirmed()
			case ctx.Err() != nil:
				// Cut off mid-call: the external system may have acted.
				res[i] = ferrytype.Unknown(err)
			default:
				res[i] = ferrytype.Rejected(err)
			}
		}()
	}
	wg.Wait()
	return res
}

func (e *taskExecutor) Close() error { return nil }

var _ ferrybroker.Publisher = (*taskExecutor)(nil)

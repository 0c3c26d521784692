package ferryamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// setup declares (declare=true) or checks the topology on conn and returns
// the names of the exchanges known to exist. defaultExchange and its kind
// are the publisher's Config.Exchange and ExchangeKind ("" for none).
func setup(ctx context.Context, conn *amqp.Connection, t Topology, declare bool, defaultExchange, defaultKind string, log *slog.Logger) (map[string]bool, error) {
	s := &setupRun{ctx: ctx, conn: conn, declare: declare, known: map[string]bool{"": true}}
	defer s.close()

	exchanges := append([]Exchange(nil), t.Exchanges...)
	listed := map[string]bool{}
	for _, e := range exchanges {
		listed[e.Name] = true
	}
	if defaultExchange != "" && !listed[defaultExchange] {
		exchanges = append(exchanges, Exchange{Name: defaultExchange, Kind: defaultKind})
		listed[defaultExchange] = true
	}
	// An alternate exchange or a binding's exchange that is not listed
	// must exist already.
	var mustExist []string
	for _, e := range exchanges {
		if e.AlternateExchange != "" && !listed[e.AlternateExchange] {
			mustExist = append(mustExist, e.AlternateExchange)
		}
	}
	for _, b := range t.Bindings {
		if b.Exchange != "" && !listed[b.Exchange] {
			mustExist = append(mustExist, b.Exchange)
		}
	}
	for _, name := range mustExist {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := s.checkExchange(name); err != nil {
			return nil, err
		}
	}
	// Alternate exchanges first, so that an exchange naming one is
	// declared after it.
	for pass := 0; pass < 2; pass++ {
		for _, e := range exchanges {
			isAE := false
			for _, o := range exchanges {
				isAE = isAE || o.AlternateExchange == e.Name
			}
			if (pass == 0) != isAE {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if err := s.exchange(e); err != nil {
				return nil, err
			}
		}
	}
	for _, q := range t.Queues {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := s.queue(q); err != nil {
			return nil, err
		}
	}
	if declare {
		for _, b := range t.Bindings {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			ex := b.Exchange
			if ex == "" {
				ex = defaultExchange
			}
			if err := s.do(func(ch *amqp.Channel) error { return ch.QueueBind(b.Queue, b.RoutingKey, ex, false, nil) }); err != nil {
				return nil, fmt.Errorf("bind queue %s to exchange %s with routing key %q: %w", b.Queue, ex, b.RoutingKey, err)
			}
		}
	} else if len(t.Bindings) > 0 {
		log.Info("bindings are not checked (AMQP 0-9-1 cannot list them); an unbound routing key shows up as returned messages",
			"bindings", len(t.Bindings))
	}
	return s.known, nil
}

// setupRun runs topology operations on a channel, opening a fresh one
// after an operation failed (a failed declare closes its channel).
type setupRun struct {
	ctx     context.Context
	conn    *amqp.Connection
	ch      *amqp.Channel
	declare bool
	known   map[string]bool
}

func (s *setupRun) do(op func(ch *amqp.Channel) error) error {
	if s.ch == nil || s.ch.IsClosed() {
		var ch *amqp.Channel
		err := rpc(s.ctx, func() (err error) { ch, err = s.conn.Channel(); return err })
		if err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		s.ch = ch
	}
	ch := s.ch
	return rpc(s.ctx, func() error { return op(ch) })
}

func (s *setupRun) close() {
	if ch := s.ch; ch != nil {
		_ = rpc(s.ctx, ch.Close)
	}
}

func (s *setupRun) checkExchange(name string) error {
	if s.known[name] {
		return nil
	}
	err := s.do(func(ch *amqp.Channel) error {
		return ch.ExchangeDeclarePassive(name, amqp.ExchangeTopic, true, false, false, false, nil)
	})
	if code(err) == amqp.NotFound {
		hint := "declare it, or let ferry declare it (Declare, --declare)"
		if strings.HasPrefix(name, "amq.") {
			hint = "check the virtual host"
		}
		return notFound(fmt.Sprintf("exchange %s does not exist: %s", name, hint), err)
	}
	if err != nil {
		return fmt.Errorf("check exchange %s: %w", name, err)
	}
	s.known[name] = true
	return nil
}

func (s *setupRun) exchange(e Exchange) error {
	if !s.declare || strings.HasPrefix(e.Name, "amq.") {
		return s.checkExchange(e.Name)
	}
	kind := e.Kind
	if kind == "" {
		kind = amqp.ExchangeTopic
	}
	args := amqp.Table{}
	if e.AlternateExchange != "" {
		args["alternate-exchange"] = e.AlternateExchange
	}
	for k, v := range e.Args {
		args[k] = v
	}
	err := s.do(func(ch *amqp.Channel) error { return ch.ExchangeDeclare(e.Name, kind, true, false, false, false, args) })
	switch code(err) {
	case 0:
		s.known[e.Name] = true
		return nil
	case amqp.PreconditionFailed:
		return fmt.Errorf("exchange %s exists with other settings than kind %s, durable, arguments %v: "+
			"delete it or configure ferry to match: %w", e.Name, kind, args, err)
	case amqp.AccessRefused:
		return fmt.Errorf("not allowed to declare exchange %s: %w", e.Name, err)
	}
	return fmt.Errorf("declare exchange %s: %w", e.Name, err)
}

// queue declares q and its parking queue (the parking queue first, as
// the queue's dead-letter target), or checks that q exists and then its
// parking queue, when one is named explicitly (a check cannot see the
// queue's dead-letter settings anyway): a missing queue is named as the
// queue, never as its parking queue.
func (s *setupRun) queue(raw Queue) error {
	q := raw.withDefaults()
	names := []string{q.Name}
	switch {
	case q.ParkingQueue == "":
	case s.declare:
		names = []string{q.ParkingQueue, q.Name}
	case raw.ParkingQueue != "":
		names = []string{q.Name, q.ParkingQueue}
	}
	for _, name := range names {
		var err error
		args := q.Arguments()
		what := "queue " + name
		if name == q.ParkingQueue {
			args = amqp.Table{"x-queue-type": string(q.Type)}
			what = "parking queue " + name + " of queue " + q.Name
		}
		if s.declare {
			err = s.do(func(ch *amqp.Channel) error {
				_, err := ch.QueueDeclare(name, true, false, false, false, args)
				return err
			})
		} else {
			err = s.do(func(ch *amqp.Channel) error {
				_, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
				return err
			})
		}
		switch code(err) {
		case 0:
			continue
		case amqp.NotFound:
			return notFound(fmt.Sprintf("%s does not exist: declare it, or let ferry declare it (Declare, --declare)", what), err)
		case amqp.PreconditionFailed:
			return fmt.Errorf("%s exists with other settings than durable, arguments %v: "+
				"delete it (after moving its messages) or configure ferry to match: %w", what, args, err)
		case amqp.AccessRefused:
			return fmt.Errorf("not allowed to declare %s: %w", what, err)
		}
		return fmt.Errorf("declare %s: %w", what, err)
	}
	return nil
}

// notFoundError says what does not exist and how to fix it, and wraps the
// server's NOT_FOUND reply (an *amqp.Error, code 404), by which callers
// tell it from a transient failure.
type notFoundError struct {
	msg string
	err error
}

func notFound(msg string, err error) error { return &notFoundError{msg: msg, err: err} }
func (e *notFoundError) Error() string     { return e.msg }
func (e *notFoundError) Unwrap() error     { return e.err }

// code returns the AMQP reply code in err, 0 for nil, -1 for an error that
// carries none.
func code(err error) int {
	if err == nil {
		return 0
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return -1
}

package ferrywatermill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
)

// RouterConfig configures a router handler (NewRouterHandler).
type RouterConfig struct {
	// Topic is the topic the handler is added to the router for: handlers
	// see it as Delivery.Route, parked copies carry it. Required.
	Topic string
	// Park and ParkTopic receive a copy, with the park headers, of poison
	// and malformed messages and of messages whose last attempt allowed by
	// Redelivery failed; the handler returns nil (the router acks) only once
	// Park.Publish returned nil. Required.
	Park      message.Publisher
	ParkTopic string
	// Redelivery bounds the attempts of a transient failure: the handler runs
	// again in place after RedeliveryPolicy's delay, up to MaxDeliveries runs,
	// then the message is parked. An error wrapping ErrSchemaOutdated
	// (the consumer's tables are not migrated) waits MaxRetryDelay and
	// nacks, however often: the message is not at fault. Defaults: 10
	// runs, 200ms doubling up to 30s.
	Redelivery ferrybroker.RedeliveryPolicy
	// Validate, when set, checks each delivery before the handler runs;
	// an error parks it as malformed. A message with a JSON Content-Type
	// metadata, or none, is always checked to hold valid JSON.
	Validate func(d *ferrybroker.Delivery) error
	// Hooks observe the handler as ferrybroker's consumer hooks; Name is
	// the name they are given (default: Topic).
	Hooks []ferrybroker.Hook
	Name  string
	// Logger receives the handler's logs. Default: slog.Default().
	Logger *slog.Logger
}

// RouterHandler is a Watermill router handler running a ferry handler with
// ferry's consumer outcomes; see NewRouterHandler.
type RouterHandler struct {
	h   ferrybroker.Handler
	cfg RouterConfig
	log *slog.Logger
	obs *ferrybroker.ConsumerObserver
}

// NewRouterHandler returns a handler for a Watermill router (its Func goes
// to Router.AddConsumerHandler) that runs h — ferry.InboxHandler, for an
// effect applied once with its inbox marker in one transaction — on each
// message, and gives the router the outcomes of ferry's own consumers:
//
//   - h returned nil: Func returns nil and the router acks, after the
//     commit;
//   - a poison error (a conflict recorded by the inbox is one), or a
//     malformed message: a copy with the park headers is published to
//     ParkTopic, then Func returns nil; if the park fails, Func returns
//     the error and the router nacks;
//   - a transient error: h runs again in place after the retry delay,
//     and the message is parked after Redelivery.MaxDeliveries runs;
//   - the router stopping (the message's context ends): Func returns the
//     error, the router nacks, the broker delivers the message again.
//
// Func never returns a handler's error straight away, so a router without
// Watermill's Retry and PoisonQueue middlewares has no hot loop of nacks.
func NewRouterHandler(h ferrybroker.Handler, cfg *RouterConfig) (*RouterHandler, error) {
	if h == nil || cfg == nil {
		return nil, fmt.Errorf("%w: ferrywatermill.NewRouterHandler needs a handler and a config", ferrytype.ErrInvalidConfig)
	}
	c := *cfg
	c.Redelivery = c.Redelivery.WithDefaults()
	if c.Name == "" {
		c.Name = c.Topic
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.Topic == "":
		return nil, fmt.Errorf("%w: RouterConfig.Topic is required", ferrytype.ErrInvalidConfig)
	case nilness.Nil(c.Park) || c.ParkTopic == "":
		return nil, fmt.Errorf("%w: RouterConfig.Park and ParkTopic are required: poison messages must go somewhere", ferrytype.ErrInvalidConfig)
	case c.Redelivery.Validate() != nil:
		return nil, fmt.Errorf("RouterConfig.Redelivery: %w", c.Redelivery.Validate())
	}
	return &RouterHandler{h: h, cfg: c, log: c.Logger.With("topic", c.Topic), obs: ferrybroker.NewConsumerObserver(c.Name, c.Hooks)}, nil
}

// Stats returns what the handler did: every message it was given is
// settled once (acked, parked, or left to the router's nack).
func (r *RouterHandler) Stats() ferrybroker.ConsumerStats { return r.obs.Stats() }

// Func is the Watermill handler function.
func (r *RouterHandler) Func(msg *message.Message) error {
	ctx := msg.Context()
	for attempt := 1; ; attempt++ {
		d, contentType, derr := delivery(r.cfg.Topic, msg)
		d.DeliveryCount = attempt
		d.Redelivered = attempt > 1 || d.Headers[MetadataRedelivered] == "true"
		r.obs.Delivered(d)
		if derr == nil {
			derr = ferrybroker.CheckDelivery(contentType, d, r.cfg.Validate)
		}
		if derr != nil {
			return r.park(msg, d, derr)
		}
		err := r.obs.Handle(ctx, r.h, d)
		switch {
		case err == nil:
			r.obs.Settled(d, ferrybroker.Settlement{Action: ferrybroker.ActionAcked})
			return nil
		case ctx.Err() != nil:
			r.obs.Settled(d, ferrybroker.Settlement{Action: ferrybroker.ActionLeft, Err: err})
			return err
		case errors.Is(err, ferrytype.ErrSchemaOutdated), errors.Is(err, ferrytype.ErrUndefinedTable):
			r.log.Error("the consumer's tables are not migrated; the message waits", "message_id", d.MessageID, "error", err)
			r.wait(ctx, r.cfg.Redelivery.MaxRetryDelay)
			r.obs.Settled(d, ferrybroker.Settlement{Action: ferrybroker.ActionRetried, Err: err})
			return err
		}
		if reason := r.cfg.Redelivery.ParkReason(err, attempt); reason != nil {
			return r.park(msg, d, reason)
		}
		r.obs.Settled(d, ferrybroker.Settlement{Action: ferrybroker.ActionRetried, Err: err})
		if !r.wait(ctx, r.cfg.Redelivery.Delay(attempt)) {
			return fmt.Errorf("retry of message %s cut off: %w (last error: %w)", d.MessageID, ctx.Err(), err)
		}
	}
}

// wait waits d or until ctx ends; it reports whether d passed.
func (r *RouterHandler) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// park publishes a copy of msg with the park headers; nil once it is
// published, the publish error otherwise (the router then nacks, and the
// delivery comes again).
func (r *RouterHandler) park(msg *message.Message, d *ferrybroker.Delivery, reason error) error {
	cp := parkCopy(msg, reason, d, r.cfg.Topic, r.cfg.Name)
	cp.SetContext(msg.Context())
	if err := publishSafely(r.cfg.Park, r.cfg.ParkTopic, cp); err != nil {
		r.obs.ParkFailed()
		r.log.Error("park failed; the message will be delivered again", "message_id", d.MessageID,
			"park_topic", r.cfg.ParkTopic, "reason", reason, "error", err)
		r.obs.Settled(d, ferrybroker.Settlement{Action: ferrybroker.ActionRetried, Err: reason})
		// Not at once: the router nacks what Func returns.
		r.wait(msg.Context(), r.cfg.Redelivery.Delay(d.DeliveryCount))
		return fmt.Errorf("park message %s: %w", d.MessageID, err)
	}
	r.log.Warn("message parked", "message_id", d.MessageID, "park_topic", r.cfg.ParkTopic, "reason", reason)
	r.obs.Settled(d, ferrybroker.Settlement{Action: ferrybroker.ActionParked, Err: reason})
	return nil
}

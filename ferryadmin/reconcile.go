package ferryadmin

import (
	"context"
	"fmt"
	"time"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// Defaults of ReconcileOptions.
const (
	DefaultReconcileWindow = 24 * time.Hour
	DefaultReconcileLimit  = 100
	DefaultReconcileBatch  = 500
	// DefaultEffectOlderThan is how long after its SENT mark an event's
	// effect is expected when a mapping of ferry's config file does not
	// say (Effect.OlderThan itself has no default).
	DefaultEffectOlderThan = 5 * time.Minute
	// DefaultEffectMarkerTable is the marker table of a mapping that does
	// not name one: the inbox's default.
	DefaultEffectMarkerTable = "consumed_operation"
)

const (
	maxEffectConsumerLen    = 64
	maxEffectMarkerTableLen = 49
	maxCheckIdentifierLen   = 63
)

// Check is a missing-events check: the rows of a business table, in the
// outbox's database, each of which must have an outbox event of EventType
// and AggregateType whose aggregate id is the row's KeyColumn.
type Check struct {
	// Name names the check in reports. Default Table.EventType.
	Name string `json:"name"`
	// Table, KeyColumn and TimeColumn name the business table and its
	// columns; each must match ^[A-Za-z_][A-Za-z0-9_]{0,62}$ and is quoted.
	Table      string `json:"table"`
	KeyColumn  string `json:"key_column"`
	TimeColumn string `json:"time_column"`
	// AggregateType is the events' aggregate type.
	AggregateType string `json:"aggregate_type"`
	// EventType is the type of event every row must have. Required.
	EventType string `json:"event_type"`
}

// Validate checks c, naming the offending field.
func (c *Check) Validate() error {
	if c.EventType == "" {
		return invalid("Check.EventType is required")
	}
	for _, id := range []struct{ name, v string }{{"Check.Table", c.Table}, {"Check.KeyColumn", c.KeyColumn},
		{"Check.TimeColumn", c.TimeColumn}} {
		if err := ferrytype.ValidateIdentifier(id.name, id.v, maxCheckIdentifierLen); err != nil {
			return err
		}
	}
	return nil
}

// Effect is a downstream-effect mapping: the SENT events of EventType
// whose effect Consumer must have applied, which its inbox records as a
// marker under the business key Key builds from the event.
type Effect struct {
	// Name names the mapping in reports. Default Consumer.EventType.
	Name string `json:"name"`
	// Consumer is the consumer's name in its inbox (at most 64 bytes).
	// Required.
	Consumer string `json:"consumer"`
	// InboxDatabaseURL is the consumer's database. Required. It may hold
	// a password: reports show it redacted.
	InboxDatabaseURL string `json:"-"`
	// InboxURLEnv names the environment variable InboxDatabaseURL was read
	// from, when it was; reports show it. Reconcile does not read it.
	InboxURLEnv string `json:"inbox_database_url_env,omitempty"`
	// MarkerTable is the consumer's marker table. Default
	// DefaultEffectMarkerTable.
	MarkerTable string `json:"marker_table"`
	// EventType is the events' type. Required.
	EventType string `json:"event_type"`
	// AggregateType, when set, keeps events of that aggregate type.
	AggregateType string `json:"aggregate_type,omitempty"`
	// Key is the KeyTemplate of the marker's business key, e.g.
	// "order:{aggregate_id}:paid". Required.
	Key string `json:"key"`
	// OlderThan skips events sent more recently: the time a consumer is
	// given to apply an event. It must be shorter than the window. Zero
	// checks every SENT event of the window. The report shows it as
	// older_than_seconds.
	OlderThan time.Duration `json:"-"`
}

func (e *Effect) withDefaults() Effect {
	c := *e
	if c.MarkerTable == "" {
		c.MarkerTable = DefaultEffectMarkerTable
	}
	if c.Name == "" {
		c.Name = c.Consumer + "." + c.EventType
	}
	return c
}

// Validate checks e, naming the offending field.
func (e *Effect) Validate() error {
	c := e.withDefaults()
	switch {
	case c.Consumer == "" || c.EventType == "" || c.Key == "":
		return invalid("Effect %s: Consumer, EventType and Key are required", c.Name)
	case len(c.Consumer) > maxEffectConsumerLen:
		return invalid("Effect %s: Consumer is longer than %d bytes", c.Name, maxEffectConsumerLen)
	case c.OlderThan < 0:
		return invalid("Effect %s: OlderThan must not be negative", c.Name)
	}
	if err := ferrytype.ValidateIdentifier("Effect.MarkerTable", c.MarkerTable, maxEffectMarkerTableLen); err != nil {
		return fmt.Errorf("effect %s: %w", c.Name, err)
	}
	if _, err := ParseKeyTemplate(c.Key); err != nil {
		return fmt.Errorf("%w: Effect %s: Key: %v", ferrytype.ErrInvalidConfig, c.Name, err)
	}
	return nil
}

// ReconcileOptions says what Reconcile checks, and bounds it.
type ReconcileOptions struct {
	// Checks are the missing-events checks.
	Checks []Check
	// Effects are the downstream-effect mappings.
	Effects []Effect
	// Window is how far back business rows and SENT events are checked.
	// Keep it shorter than the retention of SENT events; with Effects it
	// may not exceed ReplayWindow. Default (zero) DefaultReconcileWindow.
	Window time.Duration
	// Grace skips business rows younger than this (clock skew between
	// the application and the database). Default (zero) none.
	Grace time.Duration
	// PendingOlderThan reports NEW or SENDING events created longer ago
	// than this. Zero skips this check.
	PendingOlderThan time.Duration
	// Limit is the most findings listed per check, mapping and for stuck
	// events, 1 to ferrystore.MaxListLimit-1. Default (zero)
	// DefaultReconcileLimit.
	Limit int
	// Batch is the most SENT events read per page, and keys looked up per
	// inbox query, 1 to ferrystore.MaxListLimit. Default (zero)
	// DefaultReconcileBatch.
	Batch int
	// ScanLimit is the most SENT events read per mapping. Zero: no bound.
	ScanLimit int
	// ReplayWindow is the consumers' replay window: markers younger than
	// it are never purged. Default (zero) ferry.DefaultReplayWindow.
	ReplayWindow time.Duration
	// Retention is the relay's retention of SENT events, when known;
	// a Window longer than it is refused with Checks. Zero: not checked.
	Retention time.Duration
	// OpenInbox opens a consumer's inbox for an Effect. Reconcile opens
	// each (URL, marker table) once and closes it when done. Required when
	// there are Effects: ferryadmin imports no store adapter, so the caller
	// says how a URL becomes a store (ferrypg.OpenInbox, ferrymysql.OpenInbox,
	// ferrysqlite.OpenInbox, or a choice by scheme, as the ferry command
	// makes).
	OpenInbox func(ctx context.Context, url, markerTable string) (ferrystore.InboxStore, error)
}

func (o ReconcileOptions) withDefaults() (ReconcileOptions, error) {
	if o.Window == 0 {
		o.Window = DefaultReconcileWindow
	}
	if o.Limit == 0 {
		o.Limit = DefaultReconcileLimit
	}
	if o.Batch == 0 {
		o.Batch = DefaultReconcileBatch
	}
	if o.ReplayWindow == 0 {
		o.ReplayWindow = ferry.DefaultReplayWindow
	}
	switch {
	case len(o.Checks) == 0 && len(o.Effects) == 0 && o.PendingOlderThan == 0:
		return o, invalid("ReconcileOptions: nothing to check (no Checks, no Effects, no PendingOlderThan)")
	case o.Limit < 1 || o.Limit >= ferrystore.MaxListLimit:
		return o, invalid("ReconcileOptions.Limit %d must be within 1..%d", o.Limit, ferrystore.MaxListLimit-1)
	case o.Batch < 1 || o.Batch > ferrystore.MaxListLimit:
		return o, invalid("ReconcileOptions.Batch %d must be within 1..%d", o.Batch, ferrystore.MaxListLimit)
	case o.Window < 0 || o.PendingOlderThan < 0 || o.ScanLimit < 0 || o.ReplayWindow < 0 || o.Retention < 0:
		return o, invalid("ReconcileOptions: Window, PendingOlderThan, ScanLimit, ReplayWindow and Retention must not be negative")
	case len(o.Checks) > 0 && (o.Grace < 0 || o.Grace >= o.Window):
		return o, invalid("ReconcileOptions.Grace %s must be within 0..Window (%s)", o.Grace, o.Window)
	case len(o.Checks) > 0 && o.Retention > 0 && o.Window > o.Retention:
		return o, invalid("ReconcileOptions.Window %s is longer than the retention %s: rows whose SENT events "+
			"were purged would be reported missing", o.Window, o.Retention)
	case len(o.Effects) > 0 && o.Window > o.ReplayWindow:
		return o, invalid("ReconcileOptions.Window %s is longer than the replay window %s: markers older than that "+
			"may have been purged, and their events would be reported without effect", o.Window, o.ReplayWindow)
	case len(o.Effects) > 0 && o.OpenInbox == nil:
		return o, invalid("ReconcileOptions.OpenInbox is required with Effects: it opens each consumer's inbox " +
			"(ferrypg.OpenInbox, ferrymysql.OpenInbox, ferrysqlite.OpenInbox)")
	}
	for _, c := range o.Checks {
		if err := c.Validate(); err != nil {
			return o, err
		}
	}
	for _, e := range o.Effects {
		if err := e.Validate(); err != nil {
			return o, err
		}
		if e.OlderThan >= o.Window {
			return o, invalid("Effect %s: OlderThan %s must be shorter than the window %s", e.withDefaults().Name, e.OlderThan, o.Window)
		}
		if e.InboxDatabaseURL == "" {
			return o, invalid("Effect %s: InboxDatabaseURL is required", e.withDefaults().Name)
		}
	}
	return o, nil
}

// ReconcileReport is what Reconcile found. Its JSON form is the one ferry
// reconcile prints and is stable.
type ReconcileReport struct {
	Table   string         `json:"table"`
	Dialect string         `json:"dialect"`
	Checks  []CheckResult  `json:"checks"`
	Effects []EffectResult `json:"effects"`
	// Stuck lists the events pending too long; nil when not checked.
	Stuck *StuckEvents `json:"stuck,omitempty"`
	// Findings counts everything listed: missing events, missing effects,
	// stuck events.
	Findings int `json:"findings"`
}

// CheckResult is what one Check found.
type CheckResult struct {
	Check
	// Missing are the business rows without their event, at most Limit.
	Missing []ferrystore.MissingEvent `json:"missing"`
	// More reports that more rows are missing than were listed.
	More bool `json:"more"`
}

// EffectResult is what one Effect found.
type EffectResult struct {
	Effect
	// InboxDatabase names the consumer's database, its password redacted,
	// and its dialect.
	InboxDatabase    string  `json:"inbox_database"`
	OlderThanSeconds float64 `json:"older_than_seconds"`
	// Scanned counts the SENT events read; Complete is true when they were
	// all the events of the window, false when ScanLimit or Limit stopped
	// the scan.
	Scanned  int  `json:"scanned"`
	Complete bool `json:"complete"`
	// Missing are the SENT events without the consumer's marker, at most
	// Limit, in the outbox's order.
	Missing []EffectFinding `json:"missing"`
	// More reports that more were found than listed: the scan stopped.
	More bool `json:"more"`
}

// EffectFinding is a SENT event whose effect the consumer never recorded.
type EffectFinding struct {
	EventID     string    `json:"event_id"`
	Key         string    `json:"key,omitempty"`
	AggregateID string    `json:"aggregate_id"`
	CreatedAt   time.Time `json:"created_at"`
	SentAt      time.Time `json:"sent_at"`
	// Problem is "no marker", or why no key could be built ("no key: ...").
	Problem string `json:"problem"`
}

// StuckEvents are the events pending longer than PendingOlderThan.
type StuckEvents struct {
	OlderThanSeconds float64 `json:"older_than_seconds"`
	Events           []Event `json:"events"`
	More             bool    `json:"more"`
}

// Reconcile checks what compensation alone can miss, only reading:
// business rows without their event (opts.Checks), SENT events without
// their downstream effect (opts.Effects: the outbox and each consumer's
// database may differ, even in dialect; each page of opts.Batch SENT
// events is read from the outbox, then their keys are looked up in the
// inbox in one query; nothing is joined), and events pending longer than
// opts.PendingOlderThan. Every listing is bounded by opts.Limit.
func Reconcile(ctx context.Context, a ferrystore.Admin, opts ReconcileOptions) (ReconcileReport, error) {
	if err := needStore("Reconcile", a); err != nil {
		return ReconcileReport{}, err
	}
	rep := ReconcileReport{Table: a.Table(), Dialect: a.Dialect(), Checks: []CheckResult{}, Effects: []EffectResult{}}
	o, err := opts.withDefaults()
	if err != nil {
		return rep, err
	}
	for _, c := range o.Checks {
		if c.Name == "" {
			c.Name = c.Table + "." + c.EventType
		}
		found, err := a.MissingEvents(ctx, ferrystore.MissingEventsQuery{Table: c.Table, KeyColumn: c.KeyColumn,
			TimeColumn: c.TimeColumn, AggregateType: c.AggregateType, EventType: c.EventType,
			Window: o.Window, Grace: o.Grace, Limit: o.Limit + 1})
		if err != nil {
			return rep, fmt.Errorf("reconcile check %s: %w", c.Name, err)
		}
		cr := CheckResult{Check: c, Missing: found[:min(len(found), o.Limit)], More: len(found) > o.Limit}
		if cr.Missing == nil {
			cr.Missing = []ferrystore.MissingEvent{}
		}
		rep.Findings += len(cr.Missing)
		rep.Checks = append(rep.Checks, cr)
	}
	if len(o.Effects) > 0 {
		if rep.Effects, err = reconcileEffects(ctx, a, o); err != nil {
			return rep, err
		}
		for _, e := range rep.Effects {
			rep.Findings += len(e.Missing)
		}
	}
	if o.PendingOlderThan > 0 {
		rows, err := a.List(ctx, ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusNew, ferrytype.StatusSending},
			MinAge: o.PendingOlderThan, Limit: o.Limit + 1})
		if err != nil {
			return rep, fmt.Errorf("reconcile stuck events: %w", err)
		}
		rep.Stuck = &StuckEvents{OlderThanSeconds: o.PendingOlderThan.Seconds(), Events: []Event{}, More: len(rows) > o.Limit}
		if rep.Stuck.More {
			rows = rows[:o.Limit]
		}
		rep.Stuck.Events = append(rep.Stuck.Events, eventsOf(rows, false)...)
		rep.Findings += len(rep.Stuck.Events)
	}
	return rep, nil
}

// reconcileEffects checks each effect mapping, opening each consumer
// database once.
func reconcileEffects(ctx context.Context, a ferrystore.Admin, o ReconcileOptions) ([]EffectResult, error) {
	stores := map[string]ferrystore.InboxStore{}
	defer func() {
		for _, s := range stores {
			s.Close()
		}
	}()
	out := make([]EffectResult, 0, len(o.Effects))
	for _, e := range o.Effects {
		e = e.withDefaults()
		id := e.InboxDatabaseURL + "\x00" + e.MarkerTable
		s, ok := stores[id]
		if !ok {
			var err error
			if s, err = o.OpenInbox(ctx, e.InboxDatabaseURL, e.MarkerTable); err != nil {
				return nil, fmt.Errorf("reconcile effect %s: %w", e.Name, err)
			}
			stores[id] = s
		}
		res, err := checkEffect(ctx, a, s, e, o)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// checkEffect pages through the SENT events of e's type in the outbox and
// looks their keys up in the consumer's inbox, one bounded query on each
// side per page: the two may be different databases, even different
// dialects, so nothing is joined.
func checkEffect(ctx context.Context, a ferrystore.Admin, inbox ferrystore.InboxStore, e Effect, o ReconcileOptions) (EffectResult, error) {
	res := EffectResult{Effect: e, InboxDatabase: ferrytype.RedactURL(e.InboxDatabaseURL) + " (" + inbox.Dialect() + ")",
		OlderThanSeconds: e.OlderThan.Seconds(), Missing: []EffectFinding{}}
	key, err := ParseKeyTemplate(e.Key)
	if err != nil {
		return res, fmt.Errorf("reconcile effect %s: %w", e.Name, err)
	}
	q := ferrystore.SentEventsQuery{EventType: e.EventType, AggregateType: e.AggregateType, Window: o.Window,
		OlderThan: e.OlderThan, Limit: o.Batch}
	for {
		if o.ScanLimit > 0 {
			q.Limit = min(o.Batch, o.ScanLimit-res.Scanned)
		}
		rows, err := a.SentEvents(ctx, q)
		if err != nil {
			return res, fmt.Errorf("reconcile effect %s: read SENT events after %d: %w", e.Name, res.Scanned, err)
		}
		res.Scanned += len(rows)
		keys := make([]string, 0, len(rows))
		built := make([]string, len(rows))
		unkeyed := make([]error, len(rows))
		for i, r := range rows {
			if built[i], unkeyed[i] = key.Build(r); unkeyed[i] == nil {
				keys = append(keys, built[i])
			}
		}
		found, err := inbox.ExistingMarkers(ctx, e.Consumer, keys)
		if err != nil {
			return res, fmt.Errorf("reconcile effect %s: look up markers of %s: %w", e.Name, e.Consumer, err)
		}
		for i, r := range rows { // in the outbox's order
			switch {
			case unkeyed[i] != nil:
				res.add(r, "", "no key: "+unkeyed[i].Error(), o.Limit)
			case !found[built[i]]:
				res.add(r, built[i], "no marker", o.Limit)
			}
		}
		switch {
		case len(rows) < q.Limit:
			res.Complete = true
			return res, nil
		case res.More:
			return res, nil // more than Limit findings: the list is full
		case o.ScanLimit > 0 && res.Scanned >= o.ScanLimit:
			return res, nil
		case ctx.Err() != nil:
			return res, ctx.Err()
		}
		q.After = ferrystore.SentCursorOf(rows[len(rows)-1])
	}
}

func (res *EffectResult) add(r ferrystore.Row, key, problem string, limit int) {
	if len(res.Missing) >= limit {
		res.More = true
		return
	}
	res.Missing = append(res.Missing, EffectFinding{EventID: r.ID, Key: key, AggregateID: r.AggregateID,
		CreatedAt: r.CreatedAt, SentAt: r.SentAt, Problem: problem})
}

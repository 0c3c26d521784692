package shop

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"

	"github.com/ferrydev/ferry/ferrystore"
)

// Report is the checker's verdict on a run: ground truth from the orders
// database, effects from the points database and the SMS gateway.
type Report struct {
	// Ground truth.
	PaidOrders        int `json:"paid_orders"`        // committed payments
	PoisonInjected    int `json:"poison_injected"`    // paid orders with an undecodable event
	ConflictsInjected int `json:"conflicts_injected"` // paid orders announced twice with different amounts
	// Violations: each must be 0.
	Lost              int `json:"lost"`               // paid orders without their points effect
	DuplicateEffects  int `json:"duplicate_effects"`  // orders with more than one points effect
	Unexpected        int `json:"unexpected"`         // effects for orders that never paid (rolled back)
	WrongEffects      int `json:"wrong_effects"`      // effects with another user or amount than the order's
	BalanceMismatches int `json:"balance_mismatches"` // accounts whose balance is not the sum of their applied awards
	SMSLost           int `json:"sms_lost"`           // paid orders never texted
	SMSDuplicates     int `json:"sms_duplicates"`     // keys executed more than once
	SMSUnexpected     int `json:"sms_unexpected"`     // texts for orders that never paid
	ConflictMismatch  int `json:"conflict_mismatch"`  // |conflicts recorded - injected|, per consumer, summed
	OutboxLeft        int `json:"outbox_left"`        // events NEW, SENDING or DEAD
	TasksLeft         int `json:"tasks_left"`         // SMS tasks NEW, SENDING or DEAD
	// The payments API (Idempotency-Key): each must be 0.
	DoubleCharges int `json:"double_charges"`  // orders with more than one payment row
	ChargesUnpaid int `json:"charges_unpaid"`  // payment rows of orders that are not PAID
	PaidUncharged int `json:"paid_uncharged"`  // PAID orders without a payment row
	WrongReplies  int `json:"wrong_replies"`   // answers the order service got that are not what committed
	PaidEventsOff int `json:"paid_events_off"` // orders whose OrderPaid events are not exactly one (two when announced twice)
	// What the run absorbed.
	Effects           int `json:"effects"`
	SMSExecuted       int `json:"sms_executed"`
	SMSCalls          int `json:"sms_calls"` // gateway calls: beyond SMSExecuted, retries answered by key
	ConflictsRecorded int `json:"conflicts_recorded"`
	PaymentRetries    int `json:"payment_retries"` // payment attempts beyond the first
	PaymentReplays    int `json:"payment_replays"` // payments whose recorded answer was a replay
	KeyTakeovers      int `json:"key_takeovers"`   // idempotency keys taken over from a dead request
	// Violations lists what failed, in words.
	Violations []string `json:"violations"`
}

// OK reports a run without violations.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

type order struct{ user, amount int64 }

// Check compares the databases and the gateway.
func Check(ctx context.Context, orders, points *DB, gw GatewayStats) (*Report, error) {
	r := &Report{}
	paid := map[int64]order{}
	rows, err := orders.QueryContext(ctx, "SELECT id, user_id, amount FROM shop_order WHERE status = 'PAID'")
	if err != nil {
		return nil, fmt.Errorf("check: read orders: %w", err)
	}
	for rows.Next() {
		var id int64
		var o order
		if err := rows.Scan(&id, &o.user, &o.amount); err != nil {
			rows.Close()
			return nil, err
		}
		paid[id] = o
	}
	rows.Close()
	r.PaidOrders = len(paid)
	injected := map[string]map[int64]bool{"poison": {}, "conflict": {}}
	rows, err = orders.QueryContext(ctx, "SELECT order_id, kind FROM shop_injected")
	if err != nil {
		return nil, fmt.Errorf("check: read injected faults: %w", err)
	}
	for rows.Next() {
		var id int64
		var kind string
		if err := rows.Scan(&id, &kind); err != nil {
			rows.Close()
			return nil, err
		}
		injected[kind][id] = true
	}
	rows.Close()
	r.PoisonInjected, r.ConflictsInjected = len(injected["poison"]), len(injected["conflict"])

	effects := map[int64][]order{}
	rows, err = points.QueryContext(ctx, "SELECT order_id, user_id, amount FROM shop_award_log")
	if err != nil {
		return nil, fmt.Errorf("check: read effects: %w", err)
	}
	for rows.Next() {
		var id int64
		var o order
		if err := rows.Scan(&id, &o.user, &o.amount); err != nil {
			rows.Close()
			return nil, err
		}
		effects[id] = append(effects[id], o)
		r.Effects++
	}
	rows.Close()

	want := map[int64]int64{}
	for id, o := range paid {
		if injected["poison"][id] {
			if len(effects[id]) > 0 {
				r.Unexpected++
			}
			continue
		}
		es := effects[id]
		switch {
		case len(es) == 0:
			r.Lost++
			continue
		case len(es) > 1:
			r.DuplicateEffects++
		}
		// A payment announced twice with different amounts: whichever
		// announcement arrived first was applied, the other recorded as
		// the conflict. Without an ordered relay either may be first.
		conflicting := order{o.user, o.amount + ConflictExtra}
		if es[0] != o && !(injected["conflict"][id] && es[0] == conflicting) {
			r.WrongEffects++
		}
		for _, e := range es {
			want[e.user] += e.amount
		}
	}
	for id := range effects {
		if _, ok := paid[id]; !ok {
			r.Unexpected++
		}
	}
	rows, err = points.QueryContext(ctx, "SELECT user_id, points FROM points_account")
	if err != nil {
		return nil, fmt.Errorf("check: read balances: %w", err)
	}
	for rows.Next() {
		var u, p int64
		if err := rows.Scan(&u, &p); err != nil {
			rows.Close()
			return nil, err
		}
		if p != want[u] {
			r.BalanceMismatches++
		}
	}
	rows.Close()

	for id := range paid {
		if injected["poison"][id] {
			continue
		}
		if gw.Executed[SMSTaskKey(id)] == 0 {
			r.SMSLost++
		}
	}
	for key, n := range gw.Executed {
		r.SMSExecuted++
		if n > 1 {
			r.SMSDuplicates++
		}
		var id int64
		if _, err := fmt.Sscanf(key, "sms:order:%d:paid", &id); err != nil || paid[id] == (order{}) || injected["poison"][id] {
			r.SMSUnexpected++
		}
	}
	for _, n := range gw.Calls {
		r.SMSCalls += n
	}

	ib, err := points.Inbox()
	if err != nil {
		return nil, err
	}
	for _, consumer := range []string{PointsConsumer, SMSConsumer} {
		cs, err := ib.Conflicts(ctx, ferrystore.ConflictFilter{Consumer: consumer, All: true, Limit: 10000})
		if err != nil {
			return nil, fmt.Errorf("check: read conflicts: %w", err)
		}
		keys := map[string]bool{}
		for _, c := range cs {
			keys[c.Key] = true
		}
		r.ConflictsRecorded += len(keys)
		if d := len(keys) - r.ConflictsInjected; d != 0 {
			r.ConflictMismatch += max(d, -d)
		}
	}

	if err := checkPayments(ctx, orders, paid, injected["conflict"], r); err != nil {
		return nil, err
	}

	for _, t := range []struct {
		db    *DB
		table string
		left  *int
	}{{orders, "", &r.OutboxLeft}, {points, TaskTable, &r.TasksLeft}} {
		s, err := t.db.Outbox(t.table)
		if err != nil {
			return nil, err
		}
		st, err := s.Stats(ctx)
		if err != nil {
			return nil, fmt.Errorf("check: outbox stats: %w", err)
		}
		*t.left = int(st.New + st.Sending + st.Dead)
	}

	for name, v := range map[string]int{
		"lost": r.Lost, "duplicate effects": r.DuplicateEffects, "unexpected effects": r.Unexpected,
		"wrong effects": r.WrongEffects, "balance mismatches": r.BalanceMismatches, "SMS lost": r.SMSLost,
		"SMS executed twice": r.SMSDuplicates, "unexpected SMS": r.SMSUnexpected,
		"conflicts recorded != injected": r.ConflictMismatch, "outbox events left": r.OutboxLeft, "SMS tasks left": r.TasksLeft,
		"double charges": r.DoubleCharges, "charges of unpaid orders": r.ChargesUnpaid, "paid orders not charged": r.PaidUncharged,
		"payment answers other than what committed": r.WrongReplies, "orders whose OrderPaid events are not once": r.PaidEventsOff,
	} {
		if v != 0 {
			r.Violations = append(r.Violations, fmt.Sprintf("%s: %d", name, v))
		}
	}
	if r.PaidOrders == 0 {
		r.Violations = append(r.Violations, "vacuous: no order was paid")
	}
	sort.Strings(r.Violations)
	return r, nil
}

// StormBase is where the chaos suite's duplicate storm numbers its orders:
// they are announced by the storm alone, never through the payments API or
// the outbox.
const StormBase = 1_000_000

// checkPayments compares the payments, the answers the order service got
// and the OrderPaid events with the orders.
func checkPayments(ctx context.Context, orders *DB, paid map[int64]order, conflict map[int64]bool, r *Report) error {
	charges := map[int64][]string{}
	if err := scanRows(ctx, orders, "SELECT order_id, id FROM shop_payment", func(scan func(...any) error) error {
		var id int64
		var pay string
		err := scan(&id, &pay)
		charges[id] = append(charges[id], pay)
		return err
	}); err != nil {
		return fmt.Errorf("check: read payments: %w", err)
	}
	for id, cs := range charges {
		if len(cs) > 1 {
			r.DoubleCharges++
		}
		if _, ok := paid[id]; !ok {
			r.ChargesUnpaid++
		}
	}
	for id := range paid {
		if id < StormBase && len(charges[id]) == 0 {
			r.PaidUncharged++
		}
	}
	if err := scanRows(ctx, orders, "SELECT order_id, status, payment_id, attempts, replayed FROM shop_payment_reply", func(scan func(...any) error) error {
		var id, status, attempts int64
		var pay string
		var replayed bool
		if err := scan(&id, &status, &pay, &attempts, &replayed); err != nil {
			return err
		}
		r.PaymentRetries += int(attempts - 1)
		if replayed {
			r.PaymentReplays++
		}
		_, isPaid := paid[id]
		switch status {
		case 201:
			if !isPaid || len(charges[id]) != 1 || charges[id][0] != pay {
				r.WrongReplies++
			}
		default: // declined: nothing may have stayed
			if isPaid || len(charges[id]) > 0 {
				r.WrongReplies++
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("check: read payment answers: %w", err)
	}
	events := map[int64]int{}
	if err := scanRows(ctx, orders, "SELECT aggregate_id, COUNT(*) FROM outbox_event WHERE event_type = 'OrderPaid' GROUP BY aggregate_id",
		func(scan func(...any) error) error {
			var agg string
			var n int
			if err := scan(&agg, &n); err != nil {
				return err
			}
			var id int64
			fmt.Sscan(agg, &id)
			events[id] = n
			return nil
		}); err != nil {
		return fmt.Errorf("check: read OrderPaid events: %w", err)
	}
	for id := range paid {
		want := 1
		if conflict[id] {
			want = 2
		}
		if id < StormBase && events[id] != want {
			r.PaidEventsOff++
		}
	}
	for id := range events {
		if _, ok := paid[id]; !ok {
			r.PaidEventsOff++
		}
	}
	var takeovers sql.NullInt64
	if err := orders.QueryRowContext(ctx, "SELECT SUM(takeovers) FROM ferry_idempotency_key").Scan(&takeovers); err != nil {
		return fmt.Errorf("check: read idempotency keys: %w", err)
	}
	r.KeyTakeovers = int(takeovers.Int64)
	return nil
}

// scanRows runs q and calls row for each row.
func scanRows(ctx context.Context, db *DB, q string, row func(scan func(...any) error) error) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// String renders the report for people.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ground truth: %d paid orders (%d with a poison event, %d announced twice with another amount)\n",
		r.PaidOrders, r.PoisonInjected, r.ConflictsInjected)
	fmt.Fprintf(&b, "points: %d effects; lost %d, applied twice %d, unexpected %d, wrong %d; balances off: %d\n",
		r.Effects, r.Lost, r.DuplicateEffects, r.Unexpected, r.WrongEffects, r.BalanceMismatches)
	fmt.Fprintf(&b, "sms: %d texts sent for %d gateway calls (a call retried with its key sends no second text); lost %d, twice %d, unexpected %d\n",
		r.SMSExecuted, r.SMSCalls, r.SMSLost, r.SMSDuplicates, r.SMSUnexpected)
	fmt.Fprintf(&b, "conflicts recorded: %d (both consumers); outbox left: %d; tasks left: %d\n",
		r.ConflictsRecorded, r.OutboxLeft, r.TasksLeft)
	fmt.Fprintf(&b, "payments: charged twice %d, answered other than committed %d, OrderPaid not once %d, charges of unpaid %d, paid uncharged %d;"+
		" absorbed %d retries, %d replays, %d takeovers\n",
		r.DoubleCharges, r.WrongReplies, r.PaidEventsOff, r.ChargesUnpaid, r.PaidUncharged, r.PaymentRetries, r.PaymentReplays, r.KeyTakeovers)
	if r.OK() {
		b.WriteString("check: OK\n")
	} else {
		fmt.Fprintf(&b, "check: FAILED: %s\n", strings.Join(r.Violations, "; "))
	}
	return b.String()
}

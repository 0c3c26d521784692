package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/token"
)

// relayStatements are the heartbeat table's statements, by its primary key
// (relay_id); the table holds one row per relay, so the prune and the
// listing read it whole.
type relayStatements struct {
	beat, list, forget, prune string
}

func newRelayStatements(d Dialect, table string) relayStatements {
	rt := d.Quote(RelayTable(table))
	cols := []string{"host", "pid", "version", "broker", "broker_connected", "broker_error", "lanes", "ordered",
		"in_flight", "sent", "sent_last_minute", "source", "claims", "last_seen"}
	return relayStatements{
		// One row, one statement: started_at is set on insert only.
		beat: d.Rebind("INSERT INTO " + rt + " (relay_id, " + strings.Join(cols, ", ") + ", started_at)" +
			" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, " + d.Now() + ", " + d.Now() + ") " + d.Upsert("relay_id", cols)),
		list: d.Rebind("SELECT relay_id, host, pid, version, broker, broker_connected, broker_error, lanes, ordered," +
			" in_flight, sent, sent_last_minute, source, claims, " + d.AgeMicros("started_at") + ", " + d.AgeMicros("last_seen") +
			" FROM " + rt + " ORDER BY relay_id LIMIT ?"),
		forget: d.Rebind("DELETE FROM " + rt + " WHERE relay_id = ?"),
		prune:  d.Rebind("DELETE FROM " + rt + " WHERE last_seen < " + d.Shift() + " AND relay_id <> ?"),
	}
}

// Beat upserts the relay's heartbeat row.
func (o *Outbox) Beat(ctx context.Context, b ferrystore.RelayBeat) error {
	if err := b.Validate(); err != nil {
		return err
	}
	_, err := o.pool.Exec(ctx, o.relays.beat, b.ID,
		token.Truncate(b.Host, ferrystore.MaxRelayHostLen), int64(b.PID),
		token.Truncate(b.Version, ferrystore.MaxRelayVersionLen),
		token.Truncate(ferrytype.RedactURL(b.Broker), ferrystore.MaxRelayBrokerLen), b.BrokerConnected,
		token.Truncate(ferrytype.RedactURL(b.BrokerError), ferrystore.MaxRelayBrokerErrorLen),
		int64(b.Lanes), b.Ordered, b.InFlight, b.Sent, b.SentLastMinute,
		token.Truncate(b.Source, ferrystore.MaxRelaySourceLen), b.Claims)
	if err != nil {
		return fmt.Errorf("relay heartbeat: %w", err)
	}
	return nil
}

// Relays lists the heartbeat rows.
func (o *Outbox) Relays(ctx context.Context) ([]ferrystore.RelayBeat, error) {
	rows, err := o.pool.Query(ctx, o.relays.list, ferrystore.MaxListLimit)
	if err != nil {
		return nil, fmt.Errorf("list relays: %w", err)
	}
	defer rows.Close()
	now := time.Now()
	out := []ferrystore.RelayBeat{}
	for rows.Next() {
		var (
			b                 ferrystore.RelayBeat
			pid, lanes        int64
			started, lastSeen int64
		)
		if err := rows.Scan(&b.ID, &b.Host, &pid, &b.Version, &b.Broker, &b.BrokerConnected, &b.BrokerError,
			&lanes, &b.Ordered, &b.InFlight, &b.Sent, &b.SentLastMinute, &b.Source, &b.Claims, &started, &lastSeen); err != nil {
			return nil, fmt.Errorf("list relays: %w", err)
		}
		b.PID, b.Lanes = int(pid), int(lanes)
		b.StartedAt = now.Add(-time.Duration(started) * time.Microsecond)
		b.LastSeen = now.Add(-time.Duration(lastSeen) * time.Microsecond)
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list relays: %w", err)
	}
	return out, nil
}

// ForgetRelay deletes the relay's heartbeat row.
func (o *Outbox) ForgetRelay(ctx context.Context, id string) error {
	if _, err := o.pool.Exec(ctx, o.relays.forget, id); err != nil {
		return fmt.Errorf("forget relay %s: %w", id, err)
	}
	return nil
}

// PruneRelays deletes heartbeat rows older than olderThan, but keep's.
func (o *Outbox) PruneRelays(ctx context.Context, olderThan time.Duration, keep string) (int64, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("%w: prune relays: olderThan %s must be positive", ferrytype.ErrInvalidConfig, olderThan)
	}
	n, err := o.pool.Exec(ctx, o.relays.prune, ago(o.d, olderThan), keep)
	if err != nil {
		return 0, fmt.Errorf("prune relays: %w", err)
	}
	return n, nil
}

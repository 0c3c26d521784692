package ferrypgoutput

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

const (
	// closeTimeout bounds closing a connection and the last status update.
	closeTimeout = 2 * time.Second
	// heartbeat is how long Stream lets pass without calling fn before it
	// reports a batch with no events, so that the caller's checkpoint
	// follows the log while the outbox is idle.
	heartbeat = time.Second
)

// The outbox columns the feed reads.
const (
	colID       = "event_id"
	colStatus   = "status"
	colAttempts = "attempts"
	statusNew   = "NEW"
)

// relation is where the outbox's columns are in a relation's tuples; ok
// is false for a relation that is not the outbox table.
type relation struct {
	ok                   bool
	id, status, attempts int
}

// Stream reads the slot from from (empty: from the slot's
// confirmed_flush_lsn, where the last Flushed position the server received
// left it) and calls fn once for each committed transaction that made
// outbox rows NEW (inserted NEW, or updated to NEW: with the default
// REPLICA IDENTITY the old row is not in the log, so every update whose
// new row is NEW is reported, which a claim by id makes harmless). Each
// batch's Pos is the transaction's end LSN. When at least a second passed
// since fn was last called, Stream also reports transactions without such
// rows, and idle stretches of the log (the server's keepalive position), as
// batches with no events, so that the checkpoint keeps up with the log.
//
// Stream sends a standby status update every Config.StatusInterval, when
// the server asks for one, and when it returns, carrying the last
// position passed to Flushed: the server keeps the WAL after it, so a
// crash before the checkpoint loses nothing.
//
// Stream returns ctx's error when ctx ends, fn's error when fn fails,
// ferrytype.ErrClosed (wrapped) when the feed is closed, an error wrapping
// ferrystore.ErrLogGap when the slot is missing or invalidated (call
// Reset), and another error when the connection failed. fn runs on
// Stream's goroutine: while it runs no WAL is read, so it should return
// well within the server's wal_sender_timeout (60s by default).
func (f *Feed) Stream(ctx context.Context, from ferrystore.LogPosition, fn func(ctx context.Context, b ferrystore.LogBatch) error) error {
	var start pglogrepl.LSN
	if from != "" {
		lsn, err := pglogrepl.ParseLSN(string(from))
		if err != nil {
			return fmt.Errorf("pgoutput stream: %w", gapErr("position %q is not a PostgreSQL LSN (a checkpoint of another feed?)", from))
		}
		start = lsn
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := &streamHandle{cancel: cancel}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return fmt.Errorf("pgoutput stream: %w", ferrytype.ErrClosed)
	}
	f.streams[h] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.streams, h)
		f.mu.Unlock()
	}()

	err := f.stream(ctx, start, fn)
	if err != nil && ctx.Err() != nil {
		if perr := parent.Err(); perr != nil {
			return perr
		}
		f.mu.Lock()
		closed := f.closed
		f.mu.Unlock()
		if closed {
			return fmt.Errorf("pgoutput stream: %w", ferrytype.ErrClosed)
		}
	}
	return err
}

func (f *Feed) stream(ctx context.Context, start pglogrepl.LSN, fn func(ctx context.Context, b ferrystore.LogBatch) error) error {
	if start != 0 {
		if err := f.checkStart(ctx, start); err != nil {
			return err
		}
	}
	conn, err := f.connectReplication(ctx)
	if err != nil {
		return fmt.Errorf("pgoutput stream: %w", err)
	}
	defer closeConn(conn)
	pub := `"` + f.s.pub + `"`
	err = pglogrepl.StartReplication(ctx, conn, f.s.slot, start, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", "publication_names '" + pub + "'"},
	})
	if err != nil {
		return fmt.Errorf("pgoutput stream: start replication from slot %s: %w", f.s.slot, f.classifyStart(err))
	}
	r := &reader{f: f, conn: conn, fn: fn, rels: map[uint32]relation{}, lastFn: time.Now()}
	err = r.run(ctx)
	// Tell the server what was flushed, also when ctx ended: the server
	// keeps only the flush positions it received.
	if conn.IsClosed() {
		return err
	}
	if serr := r.sendStatus(false); serr != nil && err == nil {
		err = fmt.Errorf("pgoutput stream: %w", f.redact(serr))
	}
	return err
}

// classifyStart turns the server's refusal to stream a missing or
// invalidated slot into an error wrapping ferrystore.ErrLogGap.
func (f *Feed) classifyStart(err error) error {
	pe, ok := pgCode(err)
	switch {
	case ok && pe.Code == codeUndefinedObject:
		return gapErr("replication slot %s does not exist (%s): Reset the feed and read the outbox table for what the log lost", f.s.slot, pe.Message)
	case ok && pe.Code == codeNotInPrerequisite &&
		(strings.Contains(pe.Message, "can no longer get changes") || strings.Contains(pe.Detail, "invalidated")):
		return gapErr("replication slot %s was invalidated (%s): Reset the feed and read the outbox table for what the log lost", f.s.slot, pe.Message)
	case ok && pe.Code == codeInsufficientPriv:
		return setupErr("%s: grant the role REPLICATION", pe.Message)
	}
	return f.redact(err)
}

// reader decodes one replication connection's messages.
type reader struct {
	f      *Feed
	conn   *pgconn.PgConn
	fn     func(ctx context.Context, b ferrystore.LogBatch) error
	rels   map[uint32]relation
	inTx   bool
	events []ferrystore.LogEvent
	last   pglogrepl.LSN // the highest position reported to fn
	lastFn time.Time     // when fn was last called
}

func (r *reader) run(ctx context.Context) error {
	next := time.Now().Add(r.f.s.statusInterval)
	for {
		if !time.Now().Before(next) {
			if err := r.sendStatus(false); err != nil {
				return fmt.Errorf("pgoutput stream: send status: %w", r.f.redact(err))
			}
			next = time.Now().Add(r.f.s.statusInterval)
		}
		rctx, cancel := context.WithDeadline(ctx, next)
		msg, err := r.conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("pgoutput stream: receive: %w", r.f.redact(err))
		}
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if err := r.copyData(ctx, msg.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("pgoutput stream: %w", r.f.classifyStart(pgconn.ErrorResponseToPgError(msg)))
		case *pgproto3.CopyDone:
			return errors.New("pgoutput stream: the server ended replication")
		}
	}
}

// sendStatus sends the last Flushed position as written, flushed and
// applied.
func (r *reader) sendStatus(reply bool) error {
	pos := pglogrepl.LSN(r.f.flushed.Load())
	return pglogrepl.SendStandbyStatusUpdate(context.Background(), r.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pos, WALFlushPosition: pos, WALApplyPosition: pos, ReplyRequested: reply})
}

func (r *reader) copyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("pgoutput stream: %w", err)
		}
		if k.ReplyRequested {
			if err := r.sendStatus(false); err != nil {
				return fmt.Errorf("pgoutput stream: send status: %w", r.f.redact(err))
			}
		}
		// Every transaction that committed before the server's sent
		// position was sent (or skipped as not ours): between
		// transactions, it is a position to resume from.
		if !r.inTx && k.ServerWALEnd > r.last && time.Since(r.lastFn) >= heartbeat {
			return r.report(ctx, ferrystore.LogBatch{Pos: ferrystore.LogPosition(k.ServerWALEnd.String())}, k.ServerWALEnd)
		}
		return nil
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("pgoutput stream: %w", err)
		}
		return r.logical(ctx, x.WALData)
	}
	return nil
}

// logical handles one pgoutput message.
func (r *reader) logical(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch pglogrepl.MessageType(data[0]) {
	case pglogrepl.MessageTypeBegin, pglogrepl.MessageTypeCommit, pglogrepl.MessageTypeRelation,
		pglogrepl.MessageTypeInsert, pglogrepl.MessageTypeUpdate:
	default:
		return nil // deletes, truncates, types, origins: nothing becomes NEW
	}
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return fmt.Errorf("pgoutput stream: decode %s message: %w", pglogrepl.MessageType(data[0]), err)
	}
	switch m := m.(type) {
	case *pglogrepl.BeginMessage:
		r.inTx, r.events = true, r.events[:0]
	case *pglogrepl.RelationMessage:
		r.rels[m.RelationID] = r.f.relation(m)
	case *pglogrepl.InsertMessage:
		return r.row(m.RelationID, m.Tuple)
	case *pglogrepl.UpdateMessage:
		return r.row(m.RelationID, m.NewTuple)
	case *pglogrepl.CommitMessage:
		r.inTx = false
		if len(r.events) == 0 && (time.Since(r.lastFn) < heartbeat || m.TransactionEndLSN <= r.last) {
			return nil
		}
		b := ferrystore.LogBatch{Pos: ferrystore.LogPosition(m.TransactionEndLSN.String()), Committed: m.CommitTime}
		if len(r.events) > 0 {
			b.Events = append([]ferrystore.LogEvent(nil), r.events...)
		}
		r.events = r.events[:0]
		return r.report(ctx, b, m.TransactionEndLSN)
	}
	return nil
}

func (r *reader) report(ctx context.Context, b ferrystore.LogBatch, pos pglogrepl.LSN) error {
	r.lastFn = time.Now()
	if pos > r.last {
		r.last = pos
	}
	return r.fn(ctx, b)
}

// relation locates the outbox's columns in a relation message.
func (f *Feed) relation(m *pglogrepl.RelationMessage) relation {
	rel := relation{id: -1, status: -1, attempts: -1}
	if m.Namespace != f.s.schema || m.RelationName != f.s.table {
		return rel
	}
	for i, c := range m.Columns {
		switch c.Name {
		case colID:
			rel.id = i
		case colStatus:
			rel.status = i
		case colAttempts:
			rel.attempts = i
		}
	}
	rel.ok = rel.id >= 0 && rel.status >= 0
	return rel
}

// row records the event of a new row that is NEW.
func (r *reader) row(relID uint32, t *pglogrepl.TupleData) error {
	rel, known := r.rels[relID]
	if !known {
		return fmt.Errorf("pgoutput stream: a row of relation %d came before its description", relID)
	}
	if !rel.ok || t == nil {
		return nil
	}
	text := func(i int) (string, bool) {
		if i < 0 || i >= len(t.Columns) || t.Columns[i].DataType != pglogrepl.TupleDataTypeText {
			return "", false
		}
		return string(t.Columns[i].Data), true
	}
	if st, ok := text(rel.status); !ok || st != statusNew {
		return nil
	}
	id, ok := text(rel.id)
	if !ok {
		return nil
	}
	ev := ferrystore.LogEvent{ID: id}
	if a, ok := text(rel.attempts); ok {
		if n, err := strconv.Atoi(a); err == nil {
			ev.Attempts = n
		}
	}
	r.events = append(r.events, ev)
	return nil
}

// checkStart refuses to stream from start when the slot's confirmed flush
// position is past it: the server would silently begin at that position,
// skipping the changes in between. A slot only moves past what its reader
// reported flushed, and a reader reports only what it checkpointed, so a
// slot ahead of the checkpoint was dropped and created again (or advanced
// by another reader): a gap.
func (f *Feed) checkStart(ctx context.Context, start pglogrepl.LSN) error {
	var confirmed *string
	err := f.withConn(ctx, func(c *pgx.Conn) error {
		err := c.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`,
			f.s.slot).Scan(&confirmed)
		if errors.Is(err, pgx.ErrNoRows) {
			return gapErr("replication slot %s does not exist: run Check or Reset", f.s.slot)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("pgoutput stream: %w", err)
	}
	if confirmed == nil {
		return fmt.Errorf("pgoutput stream: %w", gapErr("replication slot %s was invalidated: Reset the feed", f.s.slot))
	}
	lsn, err := pglogrepl.ParseLSN(*confirmed)
	if err == nil && lsn > start {
		return fmt.Errorf("pgoutput stream: %w", gapErr("replication slot %s is at %s, past the checkpoint %s: it was "+
			"created again or advanced by another reader, and the changes in between are not in it", f.s.slot, lsn, start))
	}
	if err == nil && lsn < start {
		// Nothing before start is wanted: a slot that lags (kept from an
		// earlier reader) is advanced to it, so that the server neither
		// keeps that WAL nor decodes it all again before start.
		err := f.withConn(ctx, func(c *pgx.Conn) error {
			_, err := c.Exec(ctx, `SELECT pg_replication_slot_advance($1, $2::pg_lsn)`, f.s.slot, start.String())
			return err
		})
		if err != nil {
			f.s.logger.Debug("pgoutput: advancing the slot to the start failed", "slot", f.s.slot, "error", f.redact(err))
		}
	}
	return nil
}

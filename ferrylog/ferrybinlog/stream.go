package ferrybinlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// Pacing of the batches without events.
const (
	// emptyEvery is how long a stream of transactions without outbox
	// events goes unreported at most: then fn gets an empty batch with
	// the position reached, so that the caller's checkpoint moves on.
	emptyEvery = time.Second
	// emptyAfter is how many such transactions go unreported at most.
	emptyAfter = 1000
)

// Replication connection settings.
const (
	// heartbeat is how often an idle server sends a heartbeat, and
	// readTimeout how long the feed waits for any event before it takes
	// the connection for dead.
	heartbeat   = 5 * time.Second
	readTimeout = 4 * heartbeat
)

// errBinlogGone is the server's error for a binlog it does not hold
// (ER_MASTER_FATAL_ERROR_READING_BINLOG: "Could not find first log file
// name in binary log index file", and the like).
const errBinlogGone = 1236

// Stream reads the binlog from from (the end of the binlog now when
// empty) and calls fn with each committed transaction's outbox rows that
// became NEW: inserted NEW, or updated to NEW from another status. A
// transaction without any is reported with no events at least every
// second or every 1,000 transactions, so that the caller's checkpoint
// moves on. It returns ctx's error when ctx ends, fn's error, an error
// wrapping ferrystore.ErrLogGap when the server no longer holds from's
// file (SHOW BINARY LOGS does not list it, or the server says so), an
// error wrapping ferrytype.ErrClosed after Close, or the error that ended
// the replication connection; it never reconnects by itself.
//
// The rows are read by column position, the table's columns being read
// from information_schema when Stream starts and again after a statement
// naming the table (ALTER TABLE): rows written before an ALTER that moved
// those columns may be misread when streamed after it, which costs a
// wrong id (a claim that finds nothing), never an event. A server logging
// column names (binlog_row_metadata=FULL) avoids that: the names in the
// log are used when present.
//
// Only one Stream of a feed runs at a time; another returns an error.
func (f *Feed) Stream(ctx context.Context, from ferrystore.LogPosition, fn func(ctx context.Context, b ferrystore.LogBatch) error) error {
	f.mu.Lock()
	switch {
	case f.closed:
		f.mu.Unlock()
		return fmt.Errorf("ferrybinlog: stream: %w", ferrytype.ErrClosed)
	case f.streaming:
		f.mu.Unlock()
		return errors.New("ferrybinlog: stream: the feed is already streaming")
	}
	f.streaming = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.streaming = false
		f.mu.Unlock()
	}()

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(f.closeCtx, cancel)
	defer stop()
	err := f.stream(sctx, from, fn)
	if err != nil && sctx.Err() != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if f.closeCtx.Err() != nil {
			return fmt.Errorf("ferrybinlog: stream: %w", ferrytype.ErrClosed)
		}
	}
	return err
}

func (f *Feed) stream(ctx context.Context, from ferrystore.LogPosition, fn func(ctx context.Context, b ferrystore.LogBatch) error) error {
	var start pos
	var err error
	if from == "" {
		if start, err = f.head(ctx); err != nil {
			return err
		}
	} else if start, err = parsePos(from); err != nil {
		return fmt.Errorf("ferrybinlog: stream: %w", err)
	}
	files, err := f.binaryLogs(ctx)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(files, func(b binlogFile) bool { return b.name == start.file }) {
		return fmt.Errorf("%w: binlog position %s: the server no longer holds %s (purged, or never written)",
			ferrystore.ErrLogGap, start, start.file)
	}
	cols, err := f.columns(ctx)
	if err != nil {
		return err
	}
	var version string
	if err := f.db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return f.wrap(err, "stream: SELECT VERSION()")
	}
	flavor := gomysql.MySQLFlavor
	if strings.Contains(strings.ToLower(version), "mariadb") {
		flavor = gomysql.MariaDBFlavor
	}

	cfg := replication.BinlogSyncerConfig{
		ServerID:         f.serverID,
		Flavor:           flavor,
		User:             f.mc.User,
		Password:         f.mc.Passwd,
		HeartbeatPeriod:  heartbeat,
		ReadTimeout:      readTimeout,
		DisableRetrySync: true,
		FillZeroLogPos:   flavor == gomysql.MariaDBFlavor,
		DiscardGTIDSet:   true,
		EventCacheCount:  256,
		Logger:           slog.New(quietHandler{f.logger.With("component", "go-mysql").Handler(), slog.LevelWarn}),
	}
	if f.mc.Net == "unix" {
		cfg.Host = f.mc.Addr
	} else {
		port, perr := strconv.ParseUint(f.mc.Addr[strings.LastIndexByte(f.mc.Addr, ':')+1:], 10, 16)
		if perr != nil {
			return fmt.Errorf("%w: ferrybinlog: address %q has no port", ferrytype.ErrInvalidConfig, f.mc.Addr)
		}
		cfg.Host, cfg.Port = f.host(), uint16(port)
	}
	if f.mc.TLS != nil {
		cfg.TLSConfig = f.mc.TLS.Clone()
	}
	syncer := replication.NewBinlogSyncer(cfg)
	defer syncer.Close()
	streamer, err := syncer.StartSync(gomysql.Position{Name: start.file, Pos: start.off})
	if err != nil {
		return f.readError(err, start)
	}
	f.mu.Lock()
	f.streamed = start
	f.mu.Unlock()

	r := &reader{f: f, fn: fn, cols: cols, file: start.file, lastEmit: time.Now(), at: start}
	if r.ix, err = cols.indexes(f.table); err != nil {
		return err
	}
	for {
		ev, err := r.next(ctx, streamer)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return f.readError(err, r.at)
		}
		if ev == nil { // waited emptyEvery with a position unreported
			if err := r.emit(ctx, r.pending, nil, r.pendingTime); err != nil {
				return err
			}
			continue
		}
		if err := r.handle(ctx, ev, ev.Header.LogPos); err != nil {
			return err
		}
	}
}

// readError classifies an error of the replication connection.
func (f *Feed) readError(err error, at pos) error {
	var me *gomysql.MyError
	if errors.As(err, &me) && me.Code == errBinlogGone || gomysql.ErrorCode(err.Error()) == errBinlogGone {
		return fmt.Errorf("%w: binlog position %s: %s", ferrystore.ErrLogGap, at, ferrytype.RedactSecrets(err.Error(), f.rawURL))
	}
	return f.wrap(err, "read the binlog of %s at %s", f.mc.Addr, at)
}

// reader follows the transactions of a stream.
type reader struct {
	f    *Feed
	fn   func(ctx context.Context, b ferrystore.LogBatch) error
	cols columns
	ix   colIndex
	// mismatch is the column count of the rows events that disagreed
	// with cols after a reload; it is logged once.
	mismatch uint64

	file   string                // the binlog file being read
	at     pos                   // the end of the last transaction read
	inTx   bool                  // inside a transaction (after BEGIN)
	events []ferrystore.LogEvent // the current transaction's

	// pending is the end of the transactions without events read since
	// the last batch, skipped counts them.
	pending     pos
	pendingTime time.Time
	skipped     int
	lastEmit    time.Time
}

// next returns the next event, or nil when a position went unreported
// for emptyEvery.
func (r *reader) next(ctx context.Context, s *replication.BinlogStreamer) (*replication.BinlogEvent, error) {
	if r.pending.zero() {
		return s.GetEvent(ctx)
	}
	wctx, cancel := context.WithDeadline(ctx, r.lastEmit.Add(emptyEvery))
	defer cancel()
	ev, err := s.GetEvent(wctx)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return nil, nil
	}
	return ev, err
}

// handle reads one event; end is where the event (or the transaction
// payload holding it) ends in the binlog file.
func (r *reader) handle(ctx context.Context, ev *replication.BinlogEvent, end uint32) error {
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		r.file = string(e.NextLogName)
	case *replication.MariadbGTIDEvent:
		r.begin(!e.IsStandalone())
	case *replication.GTIDEvent:
		r.begin(false) // MySQL: BEGIN follows as a query event
	case *replication.RowsEvent:
		return r.rows(ctx, e)
	case *replication.XIDEvent:
		return r.commit(ctx, end, ev.Header.Timestamp)
	case *replication.TransactionPayloadEvent:
		// MySQL's compressed transaction: its events, one transaction.
		for _, inner := range e.Events {
			if err := r.handle(ctx, inner, ev.Header.LogPos); err != nil {
				return err
			}
		}
	case *replication.QueryEvent:
		q := strings.ToUpper(strings.TrimSpace(string(e.Query)))
		switch {
		case q == "BEGIN":
			r.begin(true)
		case q == "COMMIT":
			return r.commit(ctx, end, ev.Header.Timestamp)
		case q == "ROLLBACK":
			// The transactional part was rolled back, what a
			// non-transactional table kept is logged before.
			r.events = nil
			return r.commit(ctx, end, ev.Header.Timestamp)
		default:
			if strings.Contains(strings.ToLower(string(e.Query)), strings.ToLower(r.f.table)) {
				cols, err := r.f.columns(ctx)
				if err != nil && !errors.Is(err, ferrytype.ErrUndefinedTable) {
					return err
				}
				// A dropped table keeps the columns it had: nothing more
				// of it is read until it is created again.
				if err == nil {
					if ix, ierr := cols.indexes(r.f.table); ierr == nil {
						r.cols, r.ix, r.mismatch = cols, ix, 0
					} else {
						r.f.logger.Warn("ferrybinlog: the outbox table lost its columns", "table", r.f.table, "error", ierr)
					}
				}
			}
			if !r.inTx { // DDL and other statements on their own
				return r.commit(ctx, end, ev.Header.Timestamp)
			}
		}
	}
	return nil
}

func (r *reader) begin(inTx bool) {
	r.inTx = inTx
	r.events = nil
}

// rows collects the outbox rows of a rows event that became NEW.
func (r *reader) rows(ctx context.Context, e *replication.RowsEvent) error {
	if e.Table == nil || string(e.Table.Table) != r.f.table || string(e.Table.Schema) != r.f.schema {
		return nil
	}
	ix, ok, err := r.indexesFor(ctx, e)
	if err != nil || !ok {
		return err
	}
	switch e.Type() {
	case replication.EnumRowsEventTypeInsert:
		for _, row := range e.Rows {
			if ev, ok := rowEvent(row, ix); ok {
				r.events = append(r.events, ev)
			}
		}
	case replication.EnumRowsEventTypeUpdate:
		for i := 0; i+1 < len(e.Rows); i += 2 {
			before, after := e.Rows[i], e.Rows[i+1]
			if st, _ := text(value(before, ix.status)); st == string(ferrytype.StatusNew) {
				continue
			}
			if ev, ok := rowEvent(after, ix); ok {
				r.events = append(r.events, ev)
			}
		}
	}
	return nil
}

// indexesFor returns where event_id, status and attempts are in e's rows:
// by the column names the log carries (binlog_row_metadata=FULL), else by
// the table's columns now, read again once when their count differs.
func (r *reader) indexesFor(ctx context.Context, e *replication.RowsEvent) (colIndex, bool, error) {
	if names := e.Table.ColumnNameString(); len(names) == int(e.ColumnCount) && len(names) > 0 {
		ix, err := columns(names).indexes(r.f.table)
		return ix, err == nil, nil
	}
	if uint64(len(r.cols)) != e.ColumnCount && r.mismatch != e.ColumnCount {
		cols, err := r.f.columns(ctx)
		if err != nil && !errors.Is(err, ferrytype.ErrUndefinedTable) {
			return colIndex{}, false, err
		}
		if err == nil {
			if ix, ierr := cols.indexes(r.f.table); ierr == nil {
				r.cols, r.ix = cols, ix
			}
		}
		if uint64(len(r.cols)) != e.ColumnCount {
			r.mismatch = e.ColumnCount
			r.f.logger.Warn("ferrybinlog: the binlog's rows of the outbox table do not match its columns; they are skipped until the table changes",
				"table", r.f.table, "logged_columns", e.ColumnCount, "table_columns", len(r.cols))
		}
	}
	if uint64(len(r.cols)) != e.ColumnCount {
		return colIndex{}, false, nil
	}
	return r.ix, true, nil
}

// rowEvent returns the event of a row image whose status is NEW.
func rowEvent(row []any, ix colIndex) (ferrystore.LogEvent, bool) {
	if st, _ := text(value(row, ix.status)); st != string(ferrytype.StatusNew) {
		return ferrystore.LogEvent{}, false
	}
	id, ok := text(value(row, ix.id))
	if !ok || id == "" {
		return ferrystore.LogEvent{}, false
	}
	attempts, _ := integer(value(row, ix.attempts))
	return ferrystore.LogEvent{ID: id, Attempts: attempts}, true
}

func value(row []any, i int) any {
	if i < 0 || i >= len(row) {
		return nil
	}
	return row[i]
}

// text reads a VARCHAR value, as go-mysql decodes it.
func text(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

// integer reads an integer value, as go-mysql decodes it.
func integer(v any) (int, bool) {
	switch v := v.(type) {
	case int8:
		return int(v), true
	case int16:
		return int(v), true
	case int32:
		return int(v), true
	case int64:
		return int(v), true
	case int:
		return v, true
	case uint8:
		return int(v), true
	case uint16:
		return int(v), true
	case uint32:
		return int(v), true
	case uint64:
		return int(v), true
	case string:
		n, err := strconv.Atoi(v)
		return n, err == nil
	}
	return 0, false
}

// commit ends the current transaction at end of the current file: its
// events go to fn; without events its position is reported when due.
func (r *reader) commit(ctx context.Context, end uint32, ts uint32) error {
	r.inTx = false
	events := r.events
	r.events = nil
	var committed time.Time
	if ts > 0 {
		committed = time.Unix(int64(ts), 0)
	}
	p := pos{file: r.file, off: end}
	if end == 0 { // a position the server did not give: not a resumable one
		return nil
	}
	r.at = p
	if len(events) > 0 {
		return r.emit(ctx, p, events, committed)
	}
	r.pending, r.pendingTime = p, committed
	r.skipped++
	if r.skipped >= emptyAfter || time.Since(r.lastEmit) >= emptyEvery {
		return r.emit(ctx, p, nil, committed)
	}
	return nil
}

// emit calls fn with a batch.
func (r *reader) emit(ctx context.Context, p pos, events []ferrystore.LogEvent, committed time.Time) error {
	r.pending, r.skipped, r.lastEmit = pos{}, 0, time.Now()
	if err := r.fn(ctx, ferrystore.LogBatch{Pos: p.logPosition(), Events: events, Committed: committed}); err != nil {
		return err
	}
	r.f.mu.Lock()
	r.f.streamed = p
	r.f.mu.Unlock()
	return nil
}

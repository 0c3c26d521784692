package ferrypgoutput

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// PostgreSQL error codes the feed tells apart.
const (
	codeUndefinedObject    = "42704" // the slot does not exist
	codeDuplicateObject    = "42710" // the slot or publication exists already
	codeNotInPrerequisite  = "55000" // the slot was invalidated
	codeObjectInUse        = "55006" // the slot is active for another process
	codeInsufficientPriv   = "42501"
	codeConfigurationLimit = "53400" // max_replication_slots reached
)

// Feed is the ferrystore.LogFeed of one outbox table in PostgreSQL: it
// reads logical replication from a slot with the pgoutput plugin, over a
// publication of the table alone. It holds one regular connection, opened
// when first needed, for Check, Position, Lag and Reset, and one
// replication connection for each running Stream. Its methods are safe
// for concurrent use.
type Feed struct {
	s       settings
	pgx     *pgx.ConnConfig
	repl    *pgconn.Config
	flushed atomic.Uint64 // the last pglogrepl.LSN passed to Flushed

	mu      sync.Mutex // guards conn, closed and streams
	conn    *pgx.Conn
	closed  bool
	streams map[*streamHandle]struct{}
}

// streamHandle lets Close end a running Stream.
type streamHandle struct{ cancel context.CancelFunc }

var _ ferrystore.LogFeed = (*Feed)(nil)

// New returns a feed for cfg. It validates cfg and the URL but does not
// connect: Check, Position, Lag, Reset and Stream connect when called.
func New(cfg *Config) (*Feed, error) {
	s, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	pc, err := pgx.ParseConfig(s.url)
	if err != nil {
		return nil, fmt.Errorf("%w: ferrypgoutput: Config.URL %s: %w", ferrytype.ErrInvalidConfig,
			ferrytype.RedactURL(s.url), ferrytype.RedactError(err, s.url))
	}
	repl := pc.Config.Copy()
	if repl.RuntimeParams == nil {
		repl.RuntimeParams = map[string]string{}
	}
	repl.RuntimeParams["replication"] = "database"
	return &Feed{s: s, pgx: pc, repl: repl, streams: map[*streamHandle]struct{}{}}, nil
}

// Source names the slot and the server: "pgoutput slot ferry_outbox_event
// on 127.0.0.1:5432".
func (f *Feed) Source() string {
	return "pgoutput slot " + f.s.slot + " on " + net.JoinHostPort(f.pgx.Host, strconv.Itoa(int(f.pgx.Port)))
}

// Slot returns the replication slot's name.
func (f *Feed) Slot() string { return f.s.slot }

// Publication returns the publication's name.
func (f *Feed) Publication() string { return f.s.pub }

// qualified is the outbox table's quoted, schema-qualified name.
func (f *Feed) qualified() string { return quoteIdent(f.s.schema) + "." + quoteIdent(f.s.table) }

// display is the outbox table's name for messages.
func (f *Feed) display() string { return f.s.schema + "." + f.s.table }

// redact returns err with the URL's password removed, errors.Is intact.
func (f *Feed) redact(err error) error { return ferrytype.RedactError(err, f.s.url) }

// setupErr returns an error wrapping ferrystore.ErrLogSetup.
func setupErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ferrystore.ErrLogSetup, fmt.Sprintf(format, args...))
}

// gapErr returns an error wrapping ferrystore.ErrLogGap.
func gapErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ferrystore.ErrLogGap, fmt.Sprintf(format, args...))
}

func pgCode(err error) (*pgconn.PgError, bool) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe, true
	}
	return nil, false
}

// withConn runs fn on the feed's regular connection, opening it when
// needed, and drops the connection when fn fails other than with an
// error the server reported.
func (f *Feed) withConn(ctx context.Context, fn func(*pgx.Conn) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return fmt.Errorf("ferrypgoutput: %w", ferrytype.ErrClosed)
	}
	if f.conn == nil || f.conn.IsClosed() {
		conn, err := pgx.ConnectConfig(ctx, f.pgx)
		if err != nil {
			return fmt.Errorf("connect to %s: %w", ferrytype.RedactURL(f.s.url), f.redact(err))
		}
		f.conn = conn
	}
	err := fn(f.conn)
	if _, ok := pgCode(err); err != nil && !ok {
		_ = f.conn.Close(context.Background())
		f.conn = nil
	}
	if err != nil {
		return f.redact(err)
	}
	return nil
}

// Check verifies the server's setup and creates what is missing that the
// feed may create. It checks, in order, and returns an error wrapping
// ferrystore.ErrLogSetup that names the problem and its fix:
//
//   - wal_level is logical;
//   - the role has REPLICATION or is a superuser;
//   - the outbox table exists;
//   - the publication exists (Check creates it, FOR TABLE the outbox table
//     WITH (publish = 'insert, update'), when missing), publishes inserts
//     and updates, is not FOR ALL TABLES and covers the outbox table and
//     no other;
//   - the slot exists (Check creates it, with the pgoutput plugin, when
//     missing), uses pgoutput and belongs to this database; creating it
//     fails when max_replication_slots are taken.
//
// A slot that exists but was invalidated (wal_status lost: the server
// removed WAL the slot needed) gives an error wrapping ferrystore.ErrLogGap
// instead: call Reset, then read the table for what the log lost.
func (f *Feed) Check(ctx context.Context) error {
	err := f.withConn(ctx, func(c *pgx.Conn) error {
		if err := f.checkServer(ctx, c); err != nil {
			return err
		}
		if err := f.checkTable(ctx, c); err != nil {
			return err
		}
		return f.checkPublication(ctx, c)
	})
	if err != nil {
		return fmt.Errorf("pgoutput check: %w", err)
	}
	exists, err := f.checkSlot(ctx)
	if err != nil {
		return fmt.Errorf("pgoutput check: %w", err)
	}
	if !exists {
		if err := f.createSlot(ctx); err != nil {
			return fmt.Errorf("pgoutput check: %w", err)
		}
	}
	return nil
}

func (f *Feed) checkServer(ctx context.Context, c *pgx.Conn) error {
	var level, user string
	var repl, super bool
	err := c.QueryRow(ctx, `SELECT current_setting('wal_level'), current_user, r.rolreplication, r.rolsuper
		FROM pg_roles r WHERE r.rolname = current_user`).Scan(&level, &user, &repl, &super)
	if err != nil {
		return fmt.Errorf("read wal_level and role: %w", err)
	}
	if level != "logical" {
		return setupErr("wal_level is %s: set wal_level = logical in postgresql.conf and restart the server", level)
	}
	if !repl && !super {
		return setupErr("role %s has no REPLICATION attribute: grant it with ALTER ROLE %s WITH REPLICATION, or use a role that has it",
			user, quoteIdent(user))
	}
	return nil
}

func (f *Feed) checkTable(ctx context.Context, c *pgx.Conn) error {
	var n int
	err := c.QueryRow(ctx, `SELECT count(*) FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace
		WHERE n.nspname = $1 AND t.relname = $2 AND t.relkind IN ('r', 'p')`, f.s.schema, f.s.table).Scan(&n)
	if err != nil {
		return fmt.Errorf("look up table %s: %w", f.display(), err)
	}
	if n == 0 {
		return setupErr("table %s does not exist: migrate the outbox (ferry migrate) first, or set Config.Table", f.display())
	}
	return nil
}

func (f *Feed) checkPublication(ctx context.Context, c *pgx.Conn) error {
	var all, ins, upd bool
	err := c.QueryRow(ctx, `SELECT puballtables, pubinsert, pubupdate FROM pg_publication WHERE pubname = $1`,
		f.s.pub).Scan(&all, &ins, &upd)
	if errors.Is(err, pgx.ErrNoRows) {
		q := "CREATE PUBLICATION " + quoteIdent(f.s.pub) + " FOR TABLE " + f.qualified() +
			" WITH (publish = 'insert, update')"
		_, err = c.Exec(ctx, q)
		if pe, ok := pgCode(err); ok && pe.Code == codeDuplicateObject {
			return f.checkPublication(ctx, c) // created meanwhile by another feed
		}
		if pe, ok := pgCode(err); ok && pe.Code == codeInsufficientPriv {
			return setupErr("cannot create publication %s (%s): run %s as the table's owner, or use a role that owns %s",
				f.s.pub, pe.Message, q, f.display())
		}
		if err != nil {
			return fmt.Errorf("create publication %s: %w", f.s.pub, err)
		}
		f.s.logger.Info("ferrypgoutput: created publication", "publication", f.s.pub, "table", f.display())
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up publication %s: %w", f.s.pub, err)
	}
	if all {
		return setupErr("publication %s is FOR ALL TABLES: ferry's publication must cover the outbox table only; drop it or set Config.Publication", f.s.pub)
	}
	if !ins || !upd {
		return setupErr("publication %s does not publish inserts and updates: ALTER PUBLICATION %s SET (publish = 'insert, update'), or set Config.Publication",
			f.s.pub, quoteIdent(f.s.pub))
	}
	rows, err := c.Query(ctx, `SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1
		ORDER BY schemaname, tablename`, f.s.pub)
	if err != nil {
		return fmt.Errorf("read the tables of publication %s: %w", f.s.pub, err)
	}
	var others []string
	covered := false
	for rows.Next() {
		var schema, table string
		if err := rows.Scan(&schema, &table); err != nil {
			rows.Close()
			return fmt.Errorf("read the tables of publication %s: %w", f.s.pub, err)
		}
		if schema == f.s.schema && table == f.s.table {
			covered = true
		} else {
			others = append(others, schema+"."+table)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the tables of publication %s: %w", f.s.pub, err)
	}
	if len(others) > 0 {
		return setupErr("publication %s covers other tables (%s): ferry's publication must cover the outbox table only; drop it or set Config.Publication",
			f.s.pub, strings.Join(others, ", "))
	}
	if !covered {
		return setupErr("publication %s does not cover table %s: ALTER PUBLICATION %s ADD TABLE %s, or drop it, or set Config.Publication",
			f.s.pub, f.display(), quoteIdent(f.s.pub), f.qualified())
	}
	return nil
}

// checkSlot reports whether the slot exists, and checks that it is a
// pgoutput slot of this database that was not invalidated.
func (f *Feed) checkSlot(ctx context.Context) (bool, error) {
	var (
		exists       bool
		plugin, kind string
		db, current  string
		walStatus    string
		conflicting  bool
		reason       string
	)
	err := f.withConn(ctx, func(c *pgx.Conn) error {
		// to_jsonb reads the columns that only newer servers have
		// (wal_status from 13, conflicting from 16, invalidation_reason
		// from 17) without failing on older ones.
		err := c.QueryRow(ctx, `SELECT coalesce(s.plugin, ''), s.slot_type, coalesce(s.database::text, ''), current_database(),
				coalesce(to_jsonb(s)->>'wal_status', ''), coalesce((to_jsonb(s)->>'conflicting')::bool, false),
				coalesce(to_jsonb(s)->>'invalidation_reason', '')
			FROM pg_replication_slots s WHERE s.slot_name = $1`, f.s.slot).
			Scan(&plugin, &kind, &db, &current, &walStatus, &conflicting, &reason)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		exists = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("look up replication slot %s: %w", f.s.slot, err)
	}
	switch {
	case !exists:
		return false, nil
	case kind != "logical":
		return true, setupErr("replication slot %s is a %s slot: ferry needs a logical slot with the pgoutput plugin; drop it or set Config.Slot", f.s.slot, kind)
	case plugin != "pgoutput":
		return true, setupErr("replication slot %s uses the plugin %s: ferry needs pgoutput; drop the slot (pg_drop_replication_slot('%s')) or set Config.Slot",
			f.s.slot, plugin, f.s.slot)
	case db != current:
		return true, setupErr("replication slot %s belongs to database %s, not %s: set Config.Slot", f.s.slot, db, current)
	case walStatus == "lost" || conflicting || reason != "":
		why := "wal_status " + walStatus
		if reason != "" {
			why = reason
		} else if conflicting {
			why = "a recovery conflict"
		}
		return true, gapErr("replication slot %s was invalidated (%s): the server removed WAL the feed had not read; Reset the feed and read the outbox table for what the log lost",
			f.s.slot, why)
	}
	return true, nil
}

// createSlot creates the slot over a replication connection. A slot that
// another feed created meanwhile is not an error.
func (f *Feed) createSlot(ctx context.Context) error {
	conn, err := f.connectReplication(ctx)
	if err != nil {
		return err
	}
	defer closeConn(conn)
	_, err = pglogrepl.CreateReplicationSlot(ctx, conn, f.s.slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	if pe, ok := pgCode(err); ok {
		switch pe.Code {
		case codeDuplicateObject:
			return nil
		case codeConfigurationLimit:
			return setupErr("no free replication slot for %s (%s): raise max_replication_slots in postgresql.conf and restart, or drop unused slots (pg_replication_slots)",
				f.s.slot, pe.Message)
		}
	}
	if err != nil {
		return fmt.Errorf("create replication slot %s: %w", f.s.slot, f.redact(err))
	}
	f.s.logger.Info("ferrypgoutput: created replication slot", "slot", f.s.slot, "plugin", "pgoutput")
	return nil
}

// connectReplication opens a replication connection (replication=database).
func (f *Feed) connectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	conn, err := pgconn.ConnectConfig(ctx, f.repl)
	if pe, ok := pgCode(err); ok && pe.Code == codeInsufficientPriv {
		return nil, setupErr("replication connection to %s refused (%s): ALTER ROLE ... WITH REPLICATION, and allow it in pg_hba.conf",
			ferrytype.RedactURL(f.s.url), ferrytype.RedactSecrets(pe.Message, f.s.url))
	}
	if err != nil {
		return nil, fmt.Errorf("replication connection to %s: %w", ferrytype.RedactURL(f.s.url), f.redact(err))
	}
	return conn, nil
}

// closeConn closes a replication connection, waiting at most a little.
func closeConn(conn *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = conn.Close(ctx)
}

// Reset drops the slot, if present, and creates it again, at the current
// end of the WAL. Use it after Check or Stream returned an error wrapping
// ferrystore.ErrLogGap (the slot was dropped or invalidated): the changes
// between the old checkpoint and the new slot are not in the log, so the
// caller reads the outbox table for them (a polling claim) and streams
// from the new slot's position (Stream with an empty from, or Position
// taken after Reset). Reset fails while a Stream reads the slot.
func (f *Feed) Reset(ctx context.Context) error {
	err := f.withConn(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, f.s.slot)
		return err
	})
	if pe, ok := pgCode(err); ok && pe.Code == codeObjectInUse {
		return fmt.Errorf("pgoutput reset: replication slot %s is in use (%s): stop its reader first", f.s.slot, pe.Message)
	}
	if err != nil {
		return fmt.Errorf("pgoutput reset: drop replication slot %s: %w", f.s.slot, err)
	}
	if err := f.createSlot(ctx); err != nil {
		return fmt.Errorf("pgoutput reset: %w", err)
	}
	return nil
}

// Position returns pg_current_wal_lsn(), the end of the WAL written now.
// Every transaction that commits after the call has its commit record
// after that LSN, and a logical slot skips only the transactions whose
// commit record starts before the LSN streaming starts from: so
// Stream(Position()) reports every change committed after Position
// returned (and perhaps a few committed just before it, which is
// harmless). Position fails on a standby.
func (f *Feed) Position(ctx context.Context) (ferrystore.LogPosition, error) {
	var lsn pglogrepl.LSN
	err := f.withConn(ctx, func(c *pgx.Conn) error {
		var s string
		if err := c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
			return err
		}
		var err error
		lsn, err = pglogrepl.ParseLSN(s)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("pgoutput position: %w", err)
	}
	return ferrystore.LogPosition(lsn.String()), nil
}

// Flushed records pos as the position up to which the caller handled and
// checkpointed the log. Stream reports it to the server in its standby
// status updates (write, flush and apply positions), which moves the
// slot's confirmed_flush_lsn and lets the server discard older WAL. A pos
// that is not an LSN, or lower than one recorded before, is ignored.
func (f *Feed) Flushed(pos ferrystore.LogPosition) {
	lsn, err := pglogrepl.ParseLSN(string(pos))
	if err != nil || lsn == 0 {
		return
	}
	for {
		old := f.flushed.Load()
		if uint64(lsn) <= old || f.flushed.CompareAndSwap(old, uint64(lsn)) {
			return
		}
	}
}

// Lag reads the slot in pg_replication_slots: Bytes is the WAL the server
// keeps for it (pg_current_wal_lsn() - restart_lsn), Position its
// confirmed_flush_lsn (the last flushed position the server received) and
// Head pg_current_wal_lsn(). A missing or invalidated slot gives an error
// wrapping ferrystore.ErrLogGap.
func (f *Feed) Lag(ctx context.Context) (ferrystore.LogLag, error) {
	var (
		found          bool
		bytes          *int64
		confirmed, cur *string
	)
	err := f.withConn(ctx, func(c *pgx.Conn) error {
		err := c.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint,
				s.confirmed_flush_lsn::text, pg_current_wal_lsn()::text
			FROM pg_replication_slots s WHERE s.slot_name = $1`, f.s.slot).Scan(&bytes, &confirmed, &cur)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil {
		return ferrystore.LogLag{}, fmt.Errorf("pgoutput lag: %w", err)
	}
	if !found {
		return ferrystore.LogLag{}, fmt.Errorf("pgoutput lag: %w", gapErr("replication slot %s does not exist: run Check or Reset", f.s.slot))
	}
	if bytes == nil {
		return ferrystore.LogLag{}, fmt.Errorf("pgoutput lag: %w", gapErr("replication slot %s was invalidated (no restart_lsn): Reset the feed", f.s.slot))
	}
	lag := ferrystore.LogLag{Bytes: *bytes}
	if confirmed != nil {
		lag.Position = ferrystore.LogPosition(normalize(*confirmed))
	}
	if cur != nil {
		lag.Head = ferrystore.LogPosition(normalize(*cur))
	}
	return lag, nil
}

// normalize returns an LSN's text as pglogrepl.LSN.String writes it.
func normalize(s string) string {
	if lsn, err := pglogrepl.ParseLSN(s); err == nil {
		return lsn.String()
	}
	return s
}

// Close ends running Streams and closes the feed's connections. The slot
// and the publication stay in the database: they are what resumes the
// feed. Closing twice is safe.
func (f *Feed) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	for h := range f.streams {
		h.cancel()
	}
	if f.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		err := f.conn.Close(ctx)
		f.conn = nil
		if err != nil {
			return fmt.Errorf("pgoutput close: %w", f.redact(err))
		}
	}
	return nil
}

package ferrybinlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// pos is a binlog position: a file of the binlog and an offset in it.
type pos struct {
	file string
	off  uint32
}

func (p pos) zero() bool { return p.file == "" }

// String returns the position as a ferrystore.LogPosition: "file:offset".
func (p pos) String() string {
	if p.zero() {
		return ""
	}
	return p.file + ":" + strconv.FormatUint(uint64(p.off), 10)
}

func (p pos) logPosition() ferrystore.LogPosition { return ferrystore.LogPosition(p.String()) }

// parsePos reads "file:offset".
func parsePos(lp ferrystore.LogPosition) (pos, error) {
	s := string(lp)
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return pos{}, fmt.Errorf("%w: binlog position %q is not file:offset", ferrytype.ErrInvalidConfig, s)
	}
	off, err := strconv.ParseUint(s[i+1:], 10, 32)
	if err != nil {
		return pos{}, fmt.Errorf("%w: binlog position %q is not file:offset", ferrytype.ErrInvalidConfig, s)
	}
	return pos{file: s[:i], off: uint32(off)}, nil
}

// The statements that show the end of the binlog: MySQL 8.2 renamed
// SHOW MASTER STATUS (and 8.4 removed the old name); MariaDB knows only
// the old one.
const (
	showBinaryLogStatus = "SHOW BINARY LOG STATUS"
	showMasterStatus    = "SHOW MASTER STATUS"
)

// errParse is MySQL's error for a statement it cannot parse
// (ER_PARSE_ERROR).
const errParse = 1064

// Position returns the end of the binlog now (SHOW BINARY LOG STATUS, or
// SHOW MASTER STATUS where that is unknown): streaming from it reports
// every transaction committed after this call.
func (f *Feed) Position(ctx context.Context) (ferrystore.LogPosition, error) {
	p, err := f.head(ctx)
	if err != nil {
		return "", err
	}
	return p.logPosition(), nil
}

// head returns the end of the binlog.
func (f *Feed) head(ctx context.Context) (pos, error) {
	f.mu.Lock()
	stmt := f.statusStmt
	f.mu.Unlock()
	try := []string{showBinaryLogStatus, showMasterStatus}
	if stmt != "" {
		try = []string{stmt}
	}
	var err error
	for _, stmt := range try {
		var rows []map[string]string
		rows, err = f.query(ctx, stmt)
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == errParse {
			continue
		}
		if err != nil {
			return pos{}, f.wrap(err, "%s", stmt)
		}
		f.mu.Lock()
		f.statusStmt = stmt
		f.mu.Unlock()
		if len(rows) == 0 {
			return pos{}, fmt.Errorf("%w: %s shows no binlog (log_bin=OFF): start the server with log_bin, binlog_format=ROW and binlog_row_image=FULL",
				ferrystore.ErrLogSetup, stmt)
		}
		off, perr := strconv.ParseUint(rows[0]["Position"], 10, 32)
		if rows[0]["File"] == "" || perr != nil {
			return pos{}, fmt.Errorf("ferrybinlog: %s: unexpected File %q, Position %q", stmt, rows[0]["File"], rows[0]["Position"])
		}
		return pos{file: rows[0]["File"], off: uint32(off)}, nil
	}
	return pos{}, f.wrap(err, "%s", showMasterStatus)
}

// binlogFile is a file of the binlog and its size, as SHOW BINARY LOGS
// lists them, oldest first.
type binlogFile struct {
	name string
	size int64
}

// binaryLogs lists the binlog's files.
func (f *Feed) binaryLogs(ctx context.Context) ([]binlogFile, error) {
	rows, err := f.query(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return nil, f.wrap(err, "SHOW BINARY LOGS")
	}
	files := make([]binlogFile, 0, len(rows))
	for _, r := range rows {
		size, _ := strconv.ParseInt(r["File_size"], 10, 64)
		files = append(files, binlogFile{name: r["Log_name"], size: size})
	}
	return files, nil
}

// Lag reports the bytes of binlog from the feed's checkpoint to the
// binlog's end (SHOW BINARY LOGS' file sizes). The checkpoint is the last
// Flushed position, or when none was, the last position Stream reported
// (or started from); with neither, Lag reports Bytes 0 and no Position.
// A checkpoint whose file was purged counts from the oldest file kept.
func (f *Feed) Lag(ctx context.Context) (ferrystore.LogLag, error) {
	f.mu.Lock()
	cp := f.flushed
	if cp.zero() {
		cp = f.streamed
	}
	f.mu.Unlock()
	head, err := f.head(ctx)
	if err != nil {
		return ferrystore.LogLag{}, err
	}
	lag := ferrystore.LogLag{Position: cp.logPosition(), Head: head.logPosition()}
	if cp.zero() {
		return lag, nil
	}
	files, err := f.binaryLogs(ctx)
	if err != nil {
		return ferrystore.LogLag{}, err
	}
	lag.Bytes = lagBytes(cp, head, files)
	return lag, nil
}

// lagBytes returns the bytes of binlog from cp to head, files being the
// binlog's files oldest first. A cp whose file is not listed (purged)
// counts from the first file. It is never negative.
func lagBytes(cp, head pos, files []binlogFile) int64 {
	if cp.file == head.file {
		return max(0, int64(head.off)-int64(cp.off))
	}
	ci, hi := -1, len(files)
	for i, fl := range files {
		switch fl.name {
		case cp.file:
			ci = i
		case head.file:
			hi = i
		}
	}
	if ci > hi {
		return 0
	}
	var n int64
	for i := max(ci, 0); i < hi && i < len(files); i++ {
		if i == ci {
			n += max(0, files[i].size-int64(cp.off))
		} else {
			n += files[i].size
		}
	}
	return n + int64(head.off)
}

// query runs stmt and returns its rows, each column's value by its name
// (NULL as "").
func (f *Feed) query(ctx context.Context, stmt string, args ...any) ([]map[string]string, error) {
	rows, err := f.db.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []map[string]string
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		m := make(map[string]string, len(cols))
		for i, c := range cols {
			m[c] = vals[i].String
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

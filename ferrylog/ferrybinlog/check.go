package ferrybinlog

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// Check verifies that the server is set up for the feed, and returns an
// error wrapping ferrystore.ErrLogSetup that names what is missing and
// its fix: the binlog off, a binlog_format other than ROW, a
// binlog_row_image other than FULL, a user without REPLICATION SLAVE or
// without BINLOG MONITOR (MySQL: REPLICATION CLIENT), an outbox table
// that does not exist (also wrapping ferrytype.ErrUndefinedTable) or
// lacks the columns the feed reads. Other errors (the server not
// answering) are returned as they are, wrapped.
//
// The privilege check reads SHOW GRANTS of the current user for a grant
// on *.* of REPLICATION SLAVE (MariaDB: also REPLICATION REPLICA) or ALL
// PRIVILEGES; a privilege held only through a role is not seen.
func (f *Feed) Check(ctx context.Context) error {
	rows, err := f.query(ctx, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', 'binlog_row_image')")
	if err != nil {
		return f.wrap(err, "check: read the binlog settings")
	}
	vars := make(map[string]string, len(rows))
	for _, r := range rows {
		vars[strings.ToLower(r["Variable_name"])] = r["Value"]
	}
	if err := settingsProblem(vars); err != nil {
		return err
	}
	grants, err := f.query(ctx, "SHOW GRANTS")
	if err != nil {
		return f.wrap(err, "check: SHOW GRANTS")
	}
	var lines []string
	for _, g := range grants {
		for _, v := range g {
			lines = append(lines, v)
		}
	}
	if err := grantsProblem(f.mc.User, lines); err != nil {
		return err
	}
	if _, err := f.head(ctx); err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && (me.Number == errAccessDenied || me.Number == errSpecificAccessDenied) {
			return fmt.Errorf("%w: user %q may not read the binlog's position (%s): GRANT BINLOG MONITOR ON *.* TO the user (MySQL: GRANT REPLICATION CLIENT ON *.*)",
				ferrystore.ErrLogSetup, f.mc.User, me.Message)
		}
		return err
	}
	cols, err := f.columns(ctx)
	if err != nil {
		return err
	}
	if _, err := cols.indexes(f.table); err != nil {
		return err
	}
	return nil
}

// MySQL's errors for a missing privilege.
const (
	errAccessDenied         = 1045
	errSpecificAccessDenied = 1227
)

// settingsProblem returns an error wrapping ferrystore.ErrLogSetup when
// the server variables vars (log_bin, binlog_format, binlog_row_image,
// by lower-case name) do not suit the feed, or nil.
func settingsProblem(vars map[string]string) error {
	const fix = "start the server with log_bin, binlog_format=ROW and binlog_row_image=FULL"
	if v := strings.ToUpper(vars["log_bin"]); v != "ON" && v != "1" {
		if v == "" {
			v = "unknown"
		}
		return fmt.Errorf("%w: the binlog is off (log_bin=%s): %s", ferrystore.ErrLogSetup, v, fix)
	}
	if v := strings.ToUpper(vars["binlog_format"]); v != "ROW" {
		return fmt.Errorf("%w: binlog_format is %s, not ROW: the binlog does not carry the rows written; "+
			"SET GLOBAL binlog_format=ROW and set it in the server's configuration (sessions started before keep theirs)",
			ferrystore.ErrLogSetup, orUnknown(v))
	}
	if v := strings.ToUpper(vars["binlog_row_image"]); v != "FULL" {
		return fmt.Errorf("%w: binlog_row_image is %s, not FULL: the binlog may leave out the event_id, status and attempts columns; "+
			"SET GLOBAL binlog_row_image=FULL and set it in the server's configuration",
			ferrystore.ErrLogSetup, orUnknown(v))
	}
	return nil
}

func orUnknown(v string) string {
	if v == "" {
		return "unknown"
	}
	return v
}

// grantsProblem returns an error wrapping ferrystore.ErrLogSetup unless
// one of the SHOW GRANTS lines grants REPLICATION SLAVE (or REPLICATION
// REPLICA, or ALL PRIVILEGES) on *.*.
func grantsProblem(user string, grants []string) error {
	for _, g := range grants {
		up := strings.ToUpper(g)
		on := strings.Index(up, " ON *.*")
		if on < 0 {
			continue
		}
		privs := up[:on]
		if strings.Contains(privs, "ALL PRIVILEGES") || strings.Contains(privs, "REPLICATION SLAVE") ||
			strings.Contains(privs, "REPLICATION REPLICA") {
			return nil
		}
	}
	return fmt.Errorf("%w: user %q lacks the REPLICATION SLAVE privilege, which reading the binlog needs: "+
		"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO the user (MySQL: REPLICATION SLAVE, REPLICATION CLIENT)",
		ferrystore.ErrLogSetup, user)
}

// columns of the outbox table, by ordinal position.
type columns []string

// columns reads the outbox table's columns in their order.
func (f *Feed) columns(ctx context.Context) (columns, error) {
	rows, err := f.db.QueryContext(ctx, "SELECT COLUMN_NAME FROM information_schema.COLUMNS"+
		" WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION", f.schema, f.table)
	if err != nil {
		return nil, f.wrap(err, "read the columns of %s.%s", f.schema, f.table)
	}
	defer rows.Close()
	var cols columns
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, f.wrap(err, "read the columns of %s.%s", f.schema, f.table)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, f.wrap(err, "read the columns of %s.%s", f.schema, f.table)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("%w: %w: table %s.%s does not exist (or the user may not read it): run ferry migrate, or GRANT SELECT on it",
			ferrystore.ErrLogSetup, ferrytype.ErrUndefinedTable, f.schema, f.table)
	}
	return cols, nil
}

// colIndex is where the columns the feed reads are in a row image.
type colIndex struct{ id, status, attempts int }

// indexes finds event_id, status and attempts in cols.
func (cols columns) indexes(table string) (colIndex, error) {
	ix := colIndex{-1, -1, -1}
	for i, c := range cols {
		switch strings.ToLower(c) {
		case "event_id":
			ix.id = i
		case "status":
			ix.status = i
		case "attempts":
			ix.attempts = i
		}
	}
	if ix.id < 0 || ix.status < 0 || ix.attempts < 0 {
		return ix, fmt.Errorf("%w: %w: table %s lacks an event_id, status or attempts column: it is not a ferry outbox table, or run ferry migrate",
			ferrystore.ErrLogSetup, ferrytype.ErrSchemaOutdated, table)
	}
	return ix, nil
}

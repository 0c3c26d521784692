package ferrysqlite

import (
	"errors"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/ferrydev/ferry/ferrytype"
)

// classify wraps SQLITE_BUSY and SQLITE_LOCKED (another connection holds
// the lock past the busy timeout) in ferrytype.ErrLockConflict and
// ErrRetryable, a primary key or unique constraint violation in
// ErrDuplicate, and a missing table in ErrUndefinedTable. SQLite reports
// the last with the generic SQLITE_ERROR code, so its message is read.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	switch c := se.Code(); {
	case c&0xff == sqlite3.SQLITE_BUSY || c&0xff == sqlite3.SQLITE_LOCKED:
		return ferrytype.Classed(err, ferrytype.ErrLockConflict, ferrytype.ErrRetryable)
	case c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlite3.SQLITE_CONSTRAINT_UNIQUE:
		return ferrytype.Classed(err, ferrytype.ErrDuplicate)
	case c&0xff == sqlite3.SQLITE_ERROR && strings.Contains(se.Error(), "no such table"):
		return ferrytype.Classed(err, ferrytype.ErrUndefinedTable)
	}
	return err
}

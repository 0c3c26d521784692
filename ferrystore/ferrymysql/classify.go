package ferrymysql

import (
	"database/sql/driver"
	"errors"

	"github.com/go-sql-driver/mysql"

	"github.com/ferrydev/ferry/ferrytype"
)

// MySQL and MariaDB error numbers that ferry classifies.
const (
	errLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT
	errDeadlock        = 1213 // ER_LOCK_DEADLOCK
	errDupEntry        = 1062 // ER_DUP_ENTRY
	errNoSuchTable     = 1146 // ER_NO_SUCH_TABLE
)

// classify wraps a deadlock or lock wait timeout in
// ferrytype.ErrLockConflict and ErrRetryable, a duplicate key in
// ErrDuplicate, a missing table in ErrUndefinedTable, and a connection
// the driver found broken before sending anything (driver.ErrBadConn) in
// ErrRetryable.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case errDeadlock, errLockWaitTimeout:
			return ferrytype.Classed(err, ferrytype.ErrLockConflict, ferrytype.ErrRetryable)
		case errDupEntry:
			return ferrytype.Classed(err, ferrytype.ErrDuplicate)
		case errNoSuchTable:
			return ferrytype.Classed(err, ferrytype.ErrUndefinedTable)
		}
		return err
	}
	if errors.Is(err, driver.ErrBadConn) {
		return ferrytype.Classed(err, ferrytype.ErrRetryable)
	}
	return err
}

// isDeadlock reports InnoDB's deadlock error, which it returns at once. A
// lock wait timeout, also a lock conflict, took innodb_lock_wait_timeout
// already: claims leave it to the relay's back-off.
func isDeadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errDeadlock
}

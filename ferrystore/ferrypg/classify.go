package ferrypg

import (
	"database/sql/driver"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferrydev/ferry/ferrytype"
)

// classify wraps PostgreSQL's errors by SQLSTATE: deadlock_detected
// (40P01) and lock_not_available (55P03) in ferrytype.ErrLockConflict and
// ErrRetryable, serialization_failure (40001) in ErrRetryable,
// unique_violation (23505) in ErrDuplicate, undefined_table (42P01) in
// ErrUndefinedTable. An error pgx reports as safe to retry (nothing reached
// the server) is ErrRetryable.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40P01", "55P03":
			return ferrytype.Classed(err, ferrytype.ErrLockConflict, ferrytype.ErrRetryable)
		case "40001":
			return ferrytype.Classed(err, ferrytype.ErrRetryable)
		case "23505":
			return ferrytype.Classed(err, ferrytype.ErrDuplicate)
		case "42P01":
			return ferrytype.Classed(err, ferrytype.ErrUndefinedTable)
		}
		return err
	}
	if pgconn.SafeToRetry(err) || errors.Is(err, driver.ErrBadConn) {
		return ferrytype.Classed(err, ferrytype.ErrRetryable)
	}
	return err
}

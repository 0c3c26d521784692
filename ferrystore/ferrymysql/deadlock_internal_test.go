package ferrymysql

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/ferrydev/ferry/ferrytype"
)

// A statement that loses a deadlock runs again at once, up to
// deadlockAttempts runs; other errors, a lock wait timeout among them, are
// returned at the first run, classified.
func TestAgainOnDeadlock(t *testing.T) {
	deadlock := fmt.Errorf("mark sent: %w", &mysql.MySQLError{Number: errDeadlock, Message: "Deadlock found"})
	timeout := fmt.Errorf("mark sent: %w", &mysql.MySQLError{Number: errLockWaitTimeout, Message: "Lock wait timeout"})
	for _, c := range []struct {
		name      string
		errs      []error // the error of each run; nil past the end
		runs      int
		wantErr   error
		retryable bool
	}{
		{"SecondRunWins", []error{deadlock}, 2, nil, false},
		{"LastRunWins", []error{deadlock, deadlock, deadlock, deadlock}, deadlockAttempts, nil, false},
		{"GivesUp", []error{deadlock, deadlock, deadlock, deadlock, deadlock, deadlock}, deadlockAttempts, ferrytype.ErrLockConflict, true},
		{"TimeoutNotRetried", []error{timeout}, 1, ferrytype.ErrLockConflict, true},
		{"OtherErrorNotRetried", []error{errors.New("boom")}, 1, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			runs := 0
			n, err := againOnDeadlock(func() (int, error) {
				runs++
				if runs <= len(c.errs) {
					return 0, c.errs[runs-1]
				}
				return 7, nil
			})
			if runs != c.runs {
				t.Fatalf("runs = %d, want %d", runs, c.runs)
			}
			last := runs > len(c.errs)
			switch {
			case last && (err != nil || n != 7):
				t.Fatalf("got %d, %v; want 7, nil", n, err)
			case !last && err == nil:
				t.Fatalf("got no error after %d runs", runs)
			case c.wantErr != nil && !errors.Is(err, c.wantErr):
				t.Fatalf("error %v is not %v", err, c.wantErr)
			case c.retryable && !errors.Is(err, ferrytype.ErrRetryable):
				t.Fatalf("error %v is not retryable", err)
			}
		})
	}
}

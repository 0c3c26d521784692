package ferry_test

import (
	"errors"
	"testing"

	"github.com/ferrydev/ferry"
)

// sqlResult is a database/sql result: RowsAffected may fail.
type sqlResult struct {
	n   int64
	err error
}

func (r sqlResult) LastInsertId() (int64, error) { return 0, nil }
func (r sqlResult) RowsAffected() (int64, error) { return r.n, r.err }

// commandTag counts its rows as pgx's pgconn.CommandTag does: without an
// error.
type commandTag struct{ n int64 }

func (c commandTag) RowsAffected() int64 { return c.n }

func execResult(n int64, err error) (sqlResult, error) { return sqlResult{n: n}, err }
func execTag(n int64, err error) (commandTag, error)   { return commandTag{n: n}, err }

// The effect checks take what an Exec returns, database/sql's or pgx's,
// as it returns it: the statement's error passes through, a count other
// than one row is ErrNoEffect.
func TestExpectResultAndTag(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cases := []struct {
		name      string
		got       error
		want      error
		wantNoErr bool
	}{
		{name: "ResultOneRow", got: ferry.ExpectResult(execResult(1, nil)), wantNoErr: true},
		{name: "ResultNoRow", got: ferry.ExpectResult(execResult(0, nil)), want: ferry.ErrNoEffect},
		{name: "ResultTwoRows", got: ferry.ExpectResult(execResult(2, nil)), want: ferry.ErrNoEffect},
		{name: "ResultN", got: ferry.ExpectResultN(sqlResult{n: 2}, nil, 2), wantNoErr: true},
		{name: "ResultError", got: ferry.ExpectResult(execResult(1, boom)), want: boom},
		{name: "ResultRowsAffectedError", got: ferry.ExpectResult(sqlResult{err: boom}, nil), want: boom},
		{name: "TagOneRow", got: ferry.ExpectTag(execTag(1, nil)), wantNoErr: true},
		{name: "TagNoRow", got: ferry.ExpectTag(execTag(0, nil)), want: ferry.ErrNoEffect},
		{name: "TagTwoRows", got: ferry.ExpectTag(execTag(2, nil)), want: ferry.ErrNoEffect},
		{name: "TagError", got: ferry.ExpectTag(execTag(1, boom)), want: boom},
		{name: "NilTag", got: ferry.ExpectTag(nil, nil), want: ferry.ErrNoEffect},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.wantNoErr {
				if c.got != nil {
					t.Fatalf("got %v, want nil", c.got)
				}
				return
			}
			if !errors.Is(c.got, c.want) {
				t.Fatalf("got %v, want an error wrapping %v", c.got, c.want)
			}
		})
	}
}

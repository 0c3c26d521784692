package ferrytype_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrytype"
)

func TestRedactURL(t *testing.T) {
	cases := map[string]string{
		"mysql://root:s3cret@127.0.0.1:3306/app":            "mysql://root:xxxxx@127.0.0.1:3306/app",
		"postgres://app:p%40ss@db:5432/app?sslmode=require": "postgres://app:xxxxx@db:5432/app?sslmode=require",
		"amqp://guest:guest@127.0.0.1:5672/vhost":           "amqp://xxxxx:xxxxx@127.0.0.1:5672/vhost",
		"nats://127.0.0.1:4222":                             "nats://127.0.0.1:4222",
		"root:s3cret@tcp(127.0.0.1:3306)/app":               "root:xxxxx@tcp(127.0.0.1:3306)/app",
		"host=db user=app password=s3cret dbname=app":       "host=db user=app password=xxxxx dbname=app",
		"open mysql://root:s3cret@h/db: dial tcp: refused":  "open mysql://root:xxxxx@h/db: dial tcp: refused",
	}
	for in, want := range cases {
		got := ferrytype.RedactURL(in)
		require.Equal(t, want, got, in)
		require.NotContains(t, got, "s3cret")
	}
}

func TestValidateIdentifier(t *testing.T) {
	for _, ok := range []string{"outbox_event", "_x", "A1", strings.Repeat("a", 49)} {
		require.NoError(t, ferrytype.ValidateIdentifier("table", ok, 49), ok)
	}
	for _, bad := range []string{"", "1a", "a-b", "a b", "a;drop", "a`b", `a"b`, "é", strings.Repeat("a", 50)} {
		require.ErrorIs(t, ferrytype.ValidateIdentifier("table", bad, 49), ferrytype.ErrInvalidIdentifier, bad)
	}
}

type driverError struct{ code int }

func (e *driverError) Error() string { return "driver error" }

func TestClassedKeepsTheErrorAndAddsItsClasses(t *testing.T) {
	base := fmt.Errorf("claim: %w", &driverError{1213})
	err := ferrytype.Classed(base, ferrytype.ErrLockConflict, ferrytype.ErrRetryable)
	if !errors.Is(err, ferrytype.ErrLockConflict) || !errors.Is(err, ferrytype.ErrRetryable) || errors.Is(err, ferrytype.ErrDuplicate) {
		t.Fatalf("classes of %v are wrong", err)
	}
	var de *driverError
	if !errors.As(err, &de) || de.code != 1213 {
		t.Fatalf("the driver's error is not in the chain of %v", err)
	}
	if err.Error() != base.Error() {
		t.Fatalf("message %q, want %q", err, base)
	}
	if again := ferrytype.Classed(err, ferrytype.ErrRetryable); again != err {
		t.Fatal("classing an error again in a class it has must not wrap it again")
	}
	if ferrytype.Classed(nil, ferrytype.ErrRetryable) != nil {
		t.Fatal("nil must stay nil")
	}
}

func TestNotSentIsAnUnknownOutcomeOfItsOwnClass(t *testing.T) {
	cause := errors.New("not connected")
	r := ferrytype.NotSent(cause)
	require.Equal(t, ferrytype.OutcomeUnknown, r.Outcome, "never confirmed nor failed")
	require.True(t, r.NotSent())
	require.ErrorIs(t, r.Err, ferrytype.ErrNotSent)
	require.ErrorIs(t, r.Err, cause)
	require.Equal(t, "not connected", r.Err.Error())
	require.False(t, ferrytype.Unknown(cause).NotSent(), "a plain unknown outcome may have left")
	require.False(t, ferrytype.Rejected(ferrytype.Classed(cause, ferrytype.ErrNotSent)).NotSent(),
		"only an unknown outcome is given back")
	require.True(t, ferrytype.NotSent(nil).NotSent())
}

package ferry_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrystore"
)

// nilInboxDriver is a driver type for a typed nil.
type nilInboxDriver struct {
	ferrystore.InboxDriver[*sql.Tx]
}

type nilFilter struct{ ferry.InboxFilter }

type nilDriver struct {
	ferrystore.Driver[*sql.Tx]
}

// A constructor refuses a nil argument whether it is a plain nil or a nil
// pointer in the interface (what a failed Dial returns beside its error):
// an error at once, never a panic in a background goroutine later.
func TestConstructorsRefuseTypedNils(t *testing.T) {
	var pub *nopPublisher
	var store *nopStore
	var retry *ferry.ExponentialBackoff
	check := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, ferry.ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", name, err)
		}
	}
	_, err := ferry.NewRelay(nopStore{}, pub, nil)
	check("NewRelay, nil *nopPublisher", err)
	if err != nil && !strings.Contains(err.Error(), "nil *ferry_test.nopPublisher") {
		t.Errorf("NewRelay's error does not name the nil publisher: %v", err)
	}
	_, err = ferry.NewRelay(store, nopPublisher{}, nil)
	check("NewRelay, nil *nopStore", err)
	_, err = ferry.NewRelay(nil, nil, nil)
	check("NewRelay, nil, nil", err)
	_, err = ferry.NewOutbox[*sql.Tx]((*nilDriver)(nil), nil)
	check("NewOutbox, nil *nilDriver", err)
	_, err = ferry.NewInbox[*sql.Tx]((*nilInboxDriver)(nil), &ferry.InboxConfig{Consumer: "c"})
	check("NewInbox, nil *nilInboxDriver", err)
	_, err = ferry.NewTaskWorker(store, map[string]ferry.TaskHandler{"t": func(context.Context, ferry.Task) error { return nil }}, nil)
	check("NewTaskWorker, nil *nopStore", err)
	_, err = ferry.NewTaskWorker(nopStore{}, map[string]ferry.TaskHandler{"t": nil}, nil)
	check("NewTaskWorker, nil handler", err)

	_, err = ferry.NewRelay(nopStore{}, nopPublisher{}, &ferry.RelayConfig{Hooks: []ferry.Hook{nil}})
	check("NewRelay, a nil hook", err)
	_, err = ferry.NewInbox[*sql.Tx](nilInboxDriver{}, &ferry.InboxConfig{Consumer: "c", Filter: (*nilFilter)(nil)})
	check("NewInbox, a nil *nilFilter", err)

	// A nil policy in a config is the default, not a panic later.
	r, err := ferry.NewRelay(nopStore{}, nopPublisher{}, &ferry.RelayConfig{Retry: retry})
	if err != nil || r == nil {
		t.Fatalf("NewRelay with a nil *ExponentialBackoff policy: %v", err)
	}
}

// A hook that implements none of a part's hook interfaces would observe
// nothing: the constructor refuses it, naming it, rather than ignore it.
func TestHooksThatImplementNothingAreRefused(t *testing.T) {
	type notAHook struct{}
	_, err := ferry.NewRelay(nopStore{}, nopPublisher{}, &ferry.RelayConfig{Hooks: []ferry.Hook{notAHook{}}})
	if !errors.Is(err, ferry.ErrInvalidConfig) || !strings.Contains(err.Error(), "RelayConfig.Hooks[0] (ferry_test.notAHook)") {
		t.Errorf("NewRelay: err = %v, want ErrInvalidConfig naming RelayConfig.Hooks[0]", err)
	}
	_, err = ferry.NewOutbox[*sql.Tx](nilDriver{}, &ferry.OutboxConfig{Hooks: []ferry.Hook{notAHook{}}})
	if !errors.Is(err, ferry.ErrInvalidConfig) || !strings.Contains(err.Error(), "OutboxConfig.Hooks[0]") {
		t.Errorf("NewOutbox: err = %v, want ErrInvalidConfig naming OutboxConfig.Hooks[0]", err)
	}
	_, err = ferry.NewInbox[*sql.Tx](nilInboxDriver{}, &ferry.InboxConfig{Consumer: "c", Hooks: []ferry.Hook{notAHook{}}})
	if !errors.Is(err, ferry.ErrInvalidConfig) || !strings.Contains(err.Error(), "InboxConfig.Hooks[0]") {
		t.Errorf("NewInbox: err = %v, want ErrInvalidConfig naming InboxConfig.Hooks[0]", err)
	}
}

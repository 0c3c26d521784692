package ferryadmin

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// A store as a failed Open leaves it (pub, _ := ...): a nil pointer in
// the interface, whose every method would panic.
type nilAdmin struct{ ferrystore.Admin }
type nilInbox struct{ ferrystore.InboxStore }
type nilIdem struct{ ferrystore.IdempotencyStore }

// Every function of the package refuses a nil store, plain or typed, with
// ErrInvalidConfig naming itself, never with a panic.
func TestNilStoreIsRefused(t *testing.T) {
	ctx := context.Background()
	for _, typed := range []bool{false, true} {
		var a ferrystore.Admin
		var in ferrystore.InboxStore
		var idem ferrystore.IdempotencyStore
		if typed {
			a, in, idem = (*nilAdmin)(nil), (*nilInbox)(nil), (*nilIdem)(nil)
		}
		calls := map[string]func() error{
			"ListConflicts": func() error { _, err := ListConflicts(ctx, in, ConflictListOptions{}); return err },
			"GetConflicts":  func() error { _, err := GetConflicts(ctx, in, []int64{1}); return err },
			"ResolveConflicts": func() error {
				_, err := ResolveConflicts(ctx, in, []int64{1}, "accepted", "n", "me")
				return err
			},
			"ListDead":         func() error { _, err := ListDead(ctx, a, DeadFilter{}, 10); return err },
			"ListDiscarded":    func() error { _, err := ListDiscarded(ctx, a, DeadFilter{}, 10); return err },
			"CountDead":        func() error { _, err := CountDead(ctx, a, DeadFilter{}); return err },
			"GetEvents":        func() error { _, err := GetEvents(ctx, a, []string{"x"}); return err },
			"RetryDead":        func() error { _, err := RetryDead(ctx, a, BulkOptions{}); return err },
			"DiscardDead":      func() error { _, err := DiscardDead(ctx, a, BulkOptions{}, "r", "me"); return err },
			"RestoreDiscarded": func() error { _, err := RestoreDiscarded(ctx, a, BulkOptions{}, "me"); return err },
			"PurgeEvents":      func() error { _, err := PurgeEvents(ctx, a, PurgeOptions{}); return err },
			"PurgeMarkers":     func() error { _, err := PurgeMarkers(ctx, in, PurgeOptions{}); return err },
			"PurgeIdempotencyKeys": func() error {
				_, err := PurgeIdempotencyKeys(ctx, idem, PurgeOptions{})
				return err
			},
			"Reconcile":     func() error { _, err := Reconcile(ctx, a, ReconcileOptions{}); return err },
			"Relays":        func() error { _, err := Relays(ctx, a, 0); return err },
			"Status":        func() error { _, err := Status(ctx, a, nil); return err },
			"SummarizeDead": func() error { _, err := SummarizeDead(ctx, a, DeadFilter{}); return err },
		}
		for name, call := range calls {
			var err error
			require.NotPanics(t, func() { err = call() }, "%s (typed nil: %v)", name, typed)
			require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "%s (typed nil: %v)", name, typed)
			require.ErrorContains(t, err, name+": the store is nil")
		}
	}
}

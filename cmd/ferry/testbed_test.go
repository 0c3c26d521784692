package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/examples/shop"
	"github.com/ferrydev/ferry/ferryfault"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// What the library packages and this command link, and what each module
// requires, is checked in integration/layout (TestLibraryPackagesLinkNoTestBed,
// TestCommandLinksNoTestBed, TestLibraryModulesRequireOnlyTheirOwn,
// TestUserModuleGraph).

// `ferry relay` has no fault injection: the shop's flag is unknown to it,
// and the crash variable its binary once read does nothing.
func TestRelayHasNoFaultInjection(t *testing.T) {
	t.Parallel()
	t.Run("LoseConfirmFlagIsUnknown", func(t *testing.T) {
		code, _, errOut := ferryCLI(t, "relay", "--database-url", "sqlite:///"+t.TempDir()+"/x.db",
			"--broker-url", "nats://127.0.0.1:4222", "--lose-confirm-pct", "3")
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, "unknown flag --lose-confirm-pct for ferry relay")
	})
	t.Run("CrashAtFlagIsUnknown", func(t *testing.T) {
		code, _, errOut := ferryCLI(t, "relay", "--database-url", "sqlite:///"+t.TempDir()+"/x.db",
			"--broker-url", "nats://127.0.0.1:4222", "--crash-at", ferryfault.RelayAfterClaim)
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, "unknown flag --crash-at for ferry relay")
	})
	t.Run("CrashPointVariableDoesNothing", func(t *testing.T) {
		ctx := testsvc.Context(t, 2*time.Minute)
		dbURL := "sqlite:///" + filepath.Join(t.TempDir(), "x.db")
		code, _, errOut := ferryCLI(t, "migrate", "--database-url", dbURL)
		require.Equal(t, exitOK, code, errOut)
		store, err := ferrysqlite.Open(ctx, dbURL, nil)
		require.NoError(t, err)
		defer store.Close()
		ob, err := ferry.NewOutbox(store, nil)
		require.NoError(t, err)
		nc := testsvc.EmbeddedNATS(t)
		stream, prefix := testsvc.JetStreamStream(t, nc)
		const total = 20
		events := make([]ferry.Event, total)
		for i := range events {
			events[i] = ferry.Event{AggregateType: "order", AggregateID: fmt.Sprint(i), Type: "OrderPaid",
				Payload: json.RawMessage(`{}`), Destination: prefix + ".paid"}
		}
		tx, err := store.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		ids, err := ob.EnqueueTx(ctx, tx, events...)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())

		// The relay reaches relay.after-claim with its first batch: armed,
		// the variable would kill it there.
		cmd, out := child(t, []string{"FERRY_CRASH_POINT=" + ferryfault.RelayAfterClaim + ":1"},
			"relay", "--drain", "--database-url", dbURL, "--broker-url", nc.ConnectedUrl(), "--stream", stream,
			"--poll-interval", "20ms")
		require.NoError(t, cmd.Wait(), "the relay runs to the end: %s", out)
		require.Contains(t, out.String(), fmt.Sprintf("%d published", total))
		require.Contains(t, out.String(), "left: 0 new, 0 sending, 0 dead")
		for i, id := range ids {
			row, err := store.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, ferrytype.StatusSent, row.Status, "event %d", i)
			require.Equal(t, 1, row.Attempt, "event %d: published once", i)
		}
	})
}

// The shop's relay process (what the demo and the chaos suite run) takes
// `ferry relay`'s flags with `ferry relay`'s defaults.
func TestShopRelayHasTheRelayDefaults(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	(&shop.RelayOptions{}).Flags(fs)
	relay := newRelay(&globals{})
	shared := 0
	fs.VisitAll(func(f *flag.Flag) {
		switch f.Name {
		case "crash-at", "lose-confirm-pct", "pause-at":
			require.Nil(t, relay.Flags().Lookup(f.Name), "--%s is the shop's alone", f.Name)
			return
		case "database-url", "stats-interval":
			return // a global flag of ferry's; a harness's STATS lines
		}
		rf := relay.Flags().Lookup(f.Name)
		require.NotNil(t, rf, "ferry relay has no --%s", f.Name)
		require.Equal(t, rf.DefValue, f.DefValue, "--%s", f.Name)
		shared++
	})
	require.GreaterOrEqual(t, shared, 12)
}

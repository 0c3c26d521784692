package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// inboxBundle is a consumer's database with migrated inbox tables on fresh
// names and the seed's points_account, reachable by the CLI.
type inboxBundle struct {
	ctx      context.Context
	kind     string
	db       *sql.DB
	store    ferrystore.InboxDriver[*sql.Tx]
	url      string
	markers  string
	keys     string
	accounts string
	args     []string // --database-url and the table flags
}

func setupInbox(t *testing.T, kind string) *inboxBundle {
	t.Helper()
	b := &inboxBundle{ctx: testsvc.Context(t, 3*time.Minute), kind: kind}
	m, c, v := testsvc.InboxTables()
	k := m + "k"
	var err error
	switch kind {
	case "mysql":
		b.db, b.url = testsvc.MySQL(t), testsvc.URL(testsvc.EnvMySQL)
		b.store, err = ferrymysql.NewInbox(b.db, &ferrymysql.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v, KeyTable: k})
	case "postgres":
		b.db, b.url = testsvc.PostgresSQL(t), testsvc.URL(testsvc.EnvPostgres)
		b.store, err = ferrypg.NewStdlibInbox(b.db, &ferrypg.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v, KeyTable: k})
	case "sqlite":
		b.db = testsvc.SQLite(t)
		var file string
		require.NoError(t, b.db.QueryRow("SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&file))
		b.url = "sqlite://" + file
		b.store, err = ferrysqlite.NewInbox(b.db, &ferrysqlite.InboxConfig{MarkerTable: m, ConflictTable: c, VersionTable: v, KeyTable: k})
	}
	require.NoError(t, err)
	exec := func(q string) error { _, err := b.db.Exec(q); return err }
	testsvc.MigratedInbox(t, b.store, exec, m, m, c, v, k)
	b.markers, b.keys = m, k
	b.accounts = m + "_points"
	require.NoError(t, exec("CREATE TABLE "+b.accounts+" (user_id BIGINT PRIMARY KEY, points BIGINT NOT NULL)"))
	t.Cleanup(func() { _ = exec("DROP TABLE " + b.accounts) })
	require.NoError(t, exec("INSERT INTO "+b.accounts+" VALUES (7, 0)"))
	b.args = []string{"--database-url", b.url, "--marker-table", m, "--conflict-table", c, "--version-table", v, "--key-table", k}
	return b
}

func (b *inboxBundle) cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return ferryCLI(t, append(args, b.args...)...)
}

func (b *inboxBundle) inbox(t *testing.T, consumer string) *ferry.Inbox[*sql.Tx] {
	t.Helper()
	in, err := ferry.NewInbox(b.store, &ferry.InboxConfig{Consumer: consumer})
	require.NoError(t, err)
	return in
}

type pointsAward struct {
	UserID int64 `json:"user_id"`
	Amount int64 `json:"amount"`
}

// award processes one points award through in: the seed's operation.
func (b *inboxBundle) award(t *testing.T, in *ferry.Inbox[*sql.Tx], key, eventID string, amount int64) (ferry.InboxResult, error) {
	t.Helper()
	q := "UPDATE " + b.accounts + " SET points = points + ? WHERE user_id = ?"
	if b.kind == "postgres" {
		q = "UPDATE " + b.accounts + " SET points = points + $1 WHERE user_id = $2"
	}
	return in.Process(b.ctx, ferry.Operation{Key: key, EventID: eventID, Fields: pointsAward{7, amount}},
		func(ctx context.Context, tx *sql.Tx) error {
			return ferry.ExpectResult(tx.ExecContext(ctx, q, amount, 7))
		})
}

func (b *inboxBundle) points(t *testing.T) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.db.QueryRow("SELECT points FROM "+b.accounts+" WHERE user_id = 7").Scan(&n))
	return n
}

// A conflict recorded by the inbox is listed, shown with both versions side
// by side, and resolved with a decision that names who took it; resolving
// applies nothing, and the conflicting event delivered again is still
// refused.
func TestConflictsListShowResolve(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupInbox(t, kind)
			in := b.inbox(t, "points-award")
			res, err := b.award(t, in, "order:42:paid", "event-001", 10)
			require.NoError(t, err)
			require.Equal(t, ferry.InboxApplied, res.Outcome)
			for range 2 { // delivered twice with another amount: one conflict, seen twice
				res, err = b.award(t, in, "order:42:paid", "event-002", 99)
				require.ErrorIs(t, err, ferry.ErrConflict)
			}
			id := strconv.FormatInt(res.ConflictID, 10)

			code, out, errOut := b.cli(t, "conflicts", "list")
			require.Equal(t, exitOK, code, errOut)
			t.Logf("ferry conflicts list:\n%s", out)
			require.Regexp(t, id+` +points-award +order:42:paid +OPEN +2 +\S+ +amount +event-001 +event-002`, out)
			code, _, errOut = b.cli(t, "conflicts", "list", "--check")
			require.Equal(t, exitFindings, code, "an open conflict needs a person")
			require.Contains(t, errOut, "1 open conflict")

			code, out, errOut = b.cli(t, "conflicts", "show", id)
			require.Equal(t, exitOK, code, errOut)
			t.Logf("ferry conflicts show:\n%s", out)
			require.Contains(t, out, "conflict "+id+": consumer points-award, key order:42:paid, OPEN")
			require.Contains(t, out, "delivered 2 times")
			require.Regexp(t, `event +event-001 +event-002`, out)
			require.Regexp(t, `amount +10 +99 +differs`, out)
			require.Regexp(t, `user_id +7 +7 *\n`, out, "equal fields are not marked")
			require.Contains(t, out, "marker now:  event event-001, applied")
			require.Contains(t, out, "ferry conflicts resolve "+id+" --decision")

			code, out, errOut = b.cli(t, "conflicts", "show", id, "--json")
			require.Equal(t, exitOK, code, errOut)
			var shown []ferryadmin.Conflict
			require.NoError(t, json.Unmarshal([]byte(out), &shown))
			require.Len(t, shown, 1)
			c := shown[0]
			require.Equal(t, "OPEN", c.Status)
			require.Equal(t, int64(2), c.Occurrences)
			require.Equal(t, []string{"amount"}, c.Differing)
			require.JSONEq(t, `{"user_id":7,"amount":10}`, string(c.Stored.Fields))
			require.JSONEq(t, `{"user_id":7,"amount":99}`, string(c.Incoming.Fields))
			require.Equal(t, "event-002", c.Incoming.EventID)
			require.True(t, c.Marker.Found)
			require.Nil(t, c.Resolution)

			code, _, errOut = b.cli(t, "conflicts", "show", "999999")
			require.Equal(t, exitNoMatch, code, errOut)
			require.Contains(t, errOut, "no conflict with id 999999")

			// A decision must be one of the three, and explained.
			code, _, errOut = b.cli(t, "conflicts", "resolve", id, "--decision", "apply-incoming", "--note", "x")
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, "keep-stored, applied-manually, ignored")
			code, _, errOut = b.cli(t, "conflicts", "resolve", id, "--decision", "keep-stored")
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, "--note is required")

			code, out, errOut = b.cli(t, "conflicts", "resolve", id, "--decision", "keep-stored", "--note", "amount typo upstream, INC-7")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, "conflict "+id+" resolved: keep-stored, by ")
			require.Contains(t, out, "no effect applied, no data changed")
			got, err := b.store.GetConflict(b.ctx, res.ConflictID)
			require.NoError(t, err)
			require.Equal(t, "RESOLVED", got.Status)
			require.Equal(t, "keep-stored", got.Resolution.Decision)
			require.Equal(t, "amount typo upstream, INC-7", got.Resolution.Note)
			require.Equal(t, ferryadmin.LocalActor(), got.Resolution.By, "user@host, like dead discard")
			require.WithinDuration(t, time.Now(), got.Resolution.ResolvedAt, time.Hour)
			require.Equal(t, int64(10), b.points(t), "resolving changes no business data")
			m, err := b.store.GetMarker(b.ctx, "points-award", "order:42:paid")
			require.NoError(t, err)
			require.Equal(t, "event-001", m.EventID, "nor the marker")

			code, _, errOut = b.cli(t, "conflicts", "resolve", id, "--decision", "ignored", "--note", "again")
			require.Equal(t, exitNoMatch, code)
			require.Contains(t, errOut, "already resolved: keep-stored by "+ferryadmin.LocalActor())

			code, out, _ = b.cli(t, "conflicts", "list", "--check")
			require.Equal(t, exitOK, code)
			require.Contains(t, out, "no open conflict")
			code, out, errOut = b.cli(t, "conflicts", "list", "--all", "--consumer", "points-award", "--json")
			require.Equal(t, exitOK, code, errOut)
			var list struct {
				Conflicts []ferryadmin.Conflict `json:"conflicts"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &list))
			require.Len(t, list.Conflicts, 1)
			require.Equal(t, "keep-stored", list.Conflicts[0].Resolution.Decision)
			code, out, _ = b.cli(t, "conflicts", "list", "--all", "--consumer", "sms")
			require.Equal(t, exitOK, code)
			require.Contains(t, out, "no conflict recorded")

			// The decision is a record: the conflicting event delivered again
			// is still refused, and the conflict stays resolved.
			_, err = b.award(t, in, "order:42:paid", "event-002", 99)
			require.ErrorIs(t, err, ferry.ErrConflict)
			require.Equal(t, int64(10), b.points(t))
			got, err = b.store.GetConflict(b.ctx, res.ConflictID)
			require.NoError(t, err)
			require.Equal(t, "RESOLVED", got.Status)
			require.Equal(t, int64(3), got.Occurrences)
		})
	}
}

// purge --markers refuses a retention shorter than the replay window (7
// days unless configured), and otherwise deletes old markers in batches.
func TestPurgeMarkersKeepsTheReplayWindow(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupInbox(t, kind)
			in := b.inbox(t, "points-award")
			for i := range 5 {
				_, err := b.award(t, in, fmt.Sprintf("order:%d:paid", i), fmt.Sprint(i), 1)
				require.NoError(t, err)
			}
			purge := func(args ...string) (int, string, string) {
				return ferryCLI(t, append(args, "--database-url", b.url, "--marker-table", b.markers)...)
			}
			count := func() int64 {
				n, err := b.store.MarkerCount(b.ctx, "")
				require.NoError(t, err)
				return n
			}

			code, _, errOut := purge("purge", "--markers", "--older-than", "72h")
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, "--older-than 72h0m0s is shorter than the replay window 168h0m0s")
			cfg := writeFile(t, "ferry.yaml", "inbox:\n  replay_window: 720h\n")
			code, _, errOut = purge("purge", "--markers", "--older-than", "169h", "--config", cfg)
			require.Equal(t, exitUsage, code, "the config file's replay window counts")
			require.Contains(t, errOut, "shorter than the replay window 720h0m0s")
			code, _, errOut = purge("purge", "--markers", "--discarded", "--older-than", "169h")
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, "run them separately")
			require.Equal(t, int64(5), count(), "a refusal deletes nothing")

			code, out, errOut := purge("purge", "--markers", "--older-than", "168h")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, b.markers+": deleted 0 inbox markers older than 168h0m0s")
			require.Equal(t, int64(5), count(), "young markers stay")
			testsvc.WaitFor(t, 10*time.Second, func() bool {
				code, out, errOut = purge("purge", "--markers", "--older-than", "10ms", "--replay-window", "10ms", "--dry-run")
				require.Equal(t, exitOK, code, errOut)
				return strings.Contains(out, b.markers+": would delete 5 inbox markers older than 10ms (dry run: nothing deleted)")
			}, func() string { return "markers fall behind the database clock: " + out })
			require.Equal(t, int64(5), count(), "a dry run deletes nothing")

			var res struct {
				Table   string `json:"table"`
				Results []struct {
					Kind       string `json:"kind"`
					Deleted    int64  `json:"deleted"`
					Statements int    `json:"statements"`
				} `json:"results"`
			}
			var deleted int64
			testsvc.WaitFor(t, 10*time.Second, func() bool {
				code, out, errOut = purge("purge", "--markers", "--older-than", "10ms", "--replay-window", "10ms",
					"--batch", "2", "--json")
				require.Equal(t, exitOK, code, errOut)
				require.NoError(t, json.Unmarshal([]byte(out), &res))
				require.Equal(t, "markers", res.Results[0].Kind)
				require.LessOrEqual(t, res.Results[0].Deleted, int64(2*res.Results[0].Statements), "batches of 2")
				deleted += res.Results[0].Deleted
				return deleted == 5
			}, func() string { return "markers fall behind the database clock" })
			require.Equal(t, b.markers, res.Table)
			require.Zero(t, count())
		})
	}
}

// purge --idempotency-keys deletes expired keys only, in batches, and
// takes no --older-than: each key expires at its own time.
func TestPurgeIdempotencyKeysDeletesExpiredKeys(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setupInbox(t, kind)
			ks := b.store.(ferrystore.IdempotencyStore)
			claim := func(key string, retention time.Duration) {
				sum := sha256.Sum256([]byte(kind + key))
				h := hex.EncodeToString(sum[:])
				_, ok, err := ks.ClaimKey(b.ctx, ferrystore.KeyClaim{Hash: h, Method: "POST", Route: "POST /payments",
					Key: key, Fingerprint: h, Token: "t"}, retention, retention)
				require.NoError(t, err)
				require.True(t, ok)
			}
			for i := range 3 {
				claim(fmt.Sprint("old-", i), 10*time.Millisecond)
			}
			claim("live", time.Hour)
			purge := func(args ...string) (int, string, string) {
				return ferryCLI(t, append(args, "--database-url", b.url, "--key-table", b.keys)...)
			}
			code, _, errOut := purge("purge", "--idempotency-keys", "--older-than", "24h")
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, "--older-than does not apply")
			code, _, errOut = purge("purge", "--idempotency-keys", "--markers")
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, "run --markers or --discarded separately")

			testsvc.WaitFor(t, 10*time.Second, func() bool {
				code, out, errOut := purge("purge", "--idempotency-keys", "--dry-run")
				require.Equal(t, exitOK, code, errOut)
				return strings.Contains(out, b.keys+": would delete 3 expired idempotency keys (dry run: nothing deleted)")
			}, func() string { return "keys to expire by the database clock" })
			var keys int
			require.NoError(t, b.db.QueryRow("SELECT count(*) FROM "+b.keys).Scan(&keys))
			require.Equal(t, 4, keys, "a dry run deletes nothing")

			var deleted int
			testsvc.WaitFor(t, 10*time.Second, func() bool {
				code, out, errOut := purge("purge", "--idempotency-keys", "--batch", "2")
				require.Equal(t, exitOK, code, errOut)
				m := regexp.MustCompile(`: deleted (\d+) expired idempotency keys? in \d+ statements?`).FindStringSubmatch(out)
				require.NotNil(t, m, out)
				n, err := strconv.Atoi(m[1])
				require.NoError(t, err, out)
				deleted += n
				return deleted == 3
			}, func() string { return "keys to expire by the database clock" })
			var left int
			require.NoError(t, b.db.QueryRow("SELECT count(*) FROM "+b.keys).Scan(&left))
			require.Equal(t, 1, left, "the live key stays")
		})
	}
}

// ferry reconcile finds a SENT event whose consumer never recorded the
// operation (no marker under its business key), and not one whose marker
// exists; the outbox and the inbox are in different databases, of different
// dialects.
func TestReconcileFindsSentEventsWithoutTheirEffect(t *testing.T) {
	// serial: t.Setenv: the CLI reads the process environment, which parallel tests share.
	for _, pair := range [][2]string{{"mysql", "postgres"}, {"postgres", "sqlite"}, {"sqlite", "mysql"}} {
		t.Run(pair[0]+"_outbox_"+pair[1]+"_inbox", func(t *testing.T) {
			ob := setupOps(t, pair[0])
			ib := setupInbox(t, pair[1])
			paid := func(order int, payload string) ferry.Event {
				return ferry.Event{AggregateType: "order", AggregateID: strconv.Itoa(order), Type: "OrderPaid",
					Payload: json.RawMessage(payload)}
			}
			ids := ob.enqueue(t, paid(1, `{"order_id":1}`), paid(2, `{"order_id":2}`), paid(3, `{"order_id":3}`),
				paid(4, `{"order_id":4}`), paid(5, `{"order_id":5}`), paid(6, `{"note":"no order id"}`),
				ferry.Event{AggregateType: "order", AggregateID: "7", Type: "OrderCreated", Payload: json.RawMessage(`{}`)})
			pending := ob.enqueue(t, paid(8, `{"order_id":8}`))
			msgs, err := ob.st.Driver.Claim(ob.ctx, ferrystore.ClaimParams{Limit: 7, Token: "tok", Lease: time.Minute})
			require.NoError(t, err)
			require.Len(t, msgs, 7)
			claimed := make([]string, len(msgs))
			for i, m := range msgs {
				claimed[i] = m.ID
			}
			require.ElementsMatch(t, ids, claimed)
			_, err = ob.st.Driver.MarkSent(ob.ctx, "tok", claimed)
			require.NoError(t, err)

			points, sms := ib.inbox(t, "points-award"), ib.inbox(t, "sms")
			for _, order := range []int{1, 2, 4, 6} {
				_, err := ib.award(t, points, fmt.Sprintf("order:%d:paid", order), ids[order-1], 1)
				require.NoError(t, err)
			}
			// Order 3's only marker is another consumer's: points never
			// awarded. Order 5 has none at all.
			_, err = ib.award(t, sms, "order:3:paid", ids[2], 1)
			require.NoError(t, err)

			t.Setenv("FERRY_TEST_POINTS_DB", ib.url)
			byKeyMapping := fmt.Sprintf(`
    - name: points-awarded
      consumer: points-award
      inbox_database_url_env: FERRY_TEST_POINTS_DB
      marker_table: %s
      event_type: OrderPaid
      aggregate_type: order
      key: "order:{aggregate_id}:paid"
      older_than: 1ms`, ib.markers)
			byPayloadMapping := fmt.Sprintf(`
    - name: points-by-payload
      consumer: points-award
      inbox_database_url: %s
      marker_table: %s
      event_type: OrderPaid
      key: "order:{payload.order_id}:paid"
      older_than: 1ms`, ib.url, ib.markers)
			cfg := writeFile(t, "ferry.yaml", "reconcile:\n  window: 1h\n  effects:"+byKeyMapping+byPayloadMapping+"\n")
			var rep ferryadmin.ReconcileReport
			testsvc.WaitFor(t, 10*time.Second, func() bool {
				code, out, errOut := ob.cli(t, "reconcile", "--config", cfg, "--pending-older-than", "0", "--batch", "2", "--json")
				require.Equal(t, exitFindings, code, "%s\n%s", out, errOut)
				require.NoError(t, json.Unmarshal([]byte(out), &rep))
				return rep.Effects[0].Scanned == 6
			}, func() string { return "sent_at falls behind the database clock" })
			require.Len(t, rep.Effects, 2)
			byKey := rep.Effects[0]
			require.True(t, byKey.Complete)
			require.Equal(t, map[string]string{ids[2]: "order:3:paid", ids[4]: "order:5:paid"}, findings(byKey.Missing),
				"orders 1, 2, 4 and 6 have their marker; 7 is another type; 8 is not SENT (%s)", pending[0])
			for _, m := range byKey.Missing {
				require.Equal(t, "no marker", m.Problem)
				require.False(t, m.SentAt.IsZero())
			}
			byPayload := rep.Effects[1]
			require.Equal(t, 6, byPayload.Scanned)
			require.Equal(t, map[string]string{ids[2]: "order:3:paid", ids[4]: "order:5:paid", ids[5]: ""}, findings(byPayload.Missing))
			for _, m := range byPayload.Missing {
				if m.EventID == ids[5] {
					require.Equal(t, "no key: payload.order_id is absent", m.Problem)
				}
			}
			require.Equal(t, 5, rep.Findings)

			code, out, errOut := ob.cli(t, "reconcile", "--config", cfg, "--pending-older-than", "0")
			require.Equal(t, exitFindings, code, errOut)
			t.Logf("ferry reconcile:\n%s", out)
			require.Contains(t, out, "effect points-awarded: OrderPaid events (aggregate type \"order\") sent 1ms to 1h0m0s ago, consumer points-award in ")
			require.Contains(t, out, "read 6 SENT events (all of them): 2 without the consumer's marker")
			require.Regexp(t, ids[4]+` +order:5:paid +\S+ +no marker`, out)
			require.Contains(t, errOut, "reconcile: 5 findings")

			code, out, errOut = ob.cli(t, "reconcile", "--config", cfg, "--pending-older-than", "0", "--scan-limit", "3", "--batch", "2", "--json")
			require.Equal(t, exitFindings, code, errOut)
			require.NoError(t, json.Unmarshal([]byte(out), &rep))
			require.Equal(t, 3, rep.Effects[0].Scanned, "bounded by --scan-limit")
			require.False(t, rep.Effects[0].Complete)

			// Once the consumer applied 3 and 5, the run is clean (without
			// the mapping that cannot key event 6).
			for _, order := range []int{3, 5} {
				_, err := ib.award(t, points, fmt.Sprintf("order:%d:paid", order), ids[order-1], 1)
				require.NoError(t, err)
			}
			clean := writeFile(t, "clean.yaml", "reconcile:\n  window: 1h\n  effects:"+byKeyMapping+"\n")
			code, out, errOut = ob.cli(t, "reconcile", "--config", clean, "--pending-older-than", "0")
			require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
			require.Contains(t, out, "nothing found")

			// Markers may be purged after the replay window: a longer window
			// would report purged markers as missing effects.
			code, _, errOut = ob.cli(t, "reconcile", "--config", cfg, "--window", "200h")
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, "longer than the inbox's replay window 168h0m0s")
			code, _, errOut = ob.cli(t, "reconcile", "--config", cfg, "--window", "1ms")
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, "older_than 1ms must be shorter than --window 1ms")
			t.Setenv("FERRY_TEST_POINTS_DB", "")
			code, _, errOut = ob.cli(t, "reconcile", "--config", cfg)
			require.Equal(t, exitUsage, code)
			require.Contains(t, errOut, "FERRY_TEST_POINTS_DB, which is not set")
		})
	}
}

func findings(ms []ferryadmin.EffectFinding) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		out[m.EventID] = m.Key
	}
	return out
}

// Effect mappings are checked when the config file is read, naming the
// line and the field.
func TestReconcileEffectConfigErrors(t *testing.T) {
	t.Parallel()
	base := "reconcile:\n  effects:\n    - {consumer: points-award, inbox_database_url: sqlite:///x.db, event_type: OrderPaid, key: %q%s}\n"
	for _, c := range []struct{ key, extra, want string }{
		{"order:{aggregate}:paid", "", "unknown placeholder {aggregate}"},
		{"order:{aggregate_id:paid", "", "unclosed {"},
		{"order:paid}", "", "unmatched }"},
		{"order:paid", "", "has no placeholder"},
		{"order:{payload.}:paid", "", "empty member name"},
		{"order:{aggregate_id}:paid", ", marker_table: \"x; drop\"", "reconcile.effects[0].marker_table"},
		{"order:{aggregate_id}:paid", ", older_than: soon", "older_than \"soon\""},
		{"order:{aggregate_id}:paid", ", inbox_database_url_env: X", "set one of inbox_database_url"},
		{"order:{aggregate_id}:paid", ", table: x", "unknown field table"},
	} {
		cfg := writeFile(t, "ferry.yaml", fmt.Sprintf(base, c.key, c.extra))
		code, _, errOut := ferryCLI(t, "reconcile", "--config", cfg, "--database-url", "sqlite:///"+filepath.Join(t.TempDir(), "x.db"))
		require.Equal(t, exitUsage, code, "%s: %s", c.key+c.extra, errOut)
		require.Contains(t, errOut, "line 3")
		require.Contains(t, errOut, c.want)
	}
}

// The inbox commands open the consumer's database with the same URL rules
// as the others: an unreachable one fails with exit 1 and no password, a
// missing or unknown scheme is a usage error.
func TestInboxCommandsOnABadDatabaseURL(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"conflicts", "list"},
		{"conflicts", "show", "1"},
		{"conflicts", "resolve", "1", "--decision", "ignored", "--note", "x"},
		{"purge", "--markers", "--older-than", "168h"},
	} {
		code, _, errOut := ferryCLI(t, append(args, "--database-url", "mysql://root:s3cr3tpw@127.0.0.1:1/test?timeout=2s")...)
		require.Equal(t, exitFailed, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "127.0.0.1:1")
		require.NotContains(t, errOut, "s3cr3tpw")
		code, _, errOut = ferryCLI(t, append(args, "--database-url", "oracle://u:s3cr3tpw@h/db")...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "unknown scheme")
		require.NotContains(t, errOut, "s3cr3tpw")
		code, _, errOut = ferryCLI(t, append(args, "--database-url", "sqlite://"+filepath.Join(t.TempDir(), "x.db"), "--marker-table", "x;drop")...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "invalid identifier")
	}
}

// The consumer's database URL of an effect mapping may hold a password: it
// never appears in an error.
func TestReconcileEffectHidesTheInboxPassword(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "ferry.yaml", `
reconcile:
  effects:
    - {consumer: points-award, inbox_database_url: "mysql://root:s3cr3tpw@127.0.0.1:1/test?timeout=2s",
       event_type: OrderPaid, key: "order:{aggregate_id}:paid"}
`)
	db := "sqlite://" + filepath.Join(t.TempDir(), "x.db")
	code, _, errOut := ferryCLI(t, "migrate", "--database-url", db)
	require.Equal(t, exitOK, code, errOut)
	code, out, errOut := ferryCLI(t, "reconcile", "--config", cfg, "--database-url", db)
	require.Equal(t, exitFailed, code, errOut)
	require.Contains(t, errOut, "reconcile effect points-award.OrderPaid")
	require.Contains(t, errOut, "127.0.0.1:1")
	require.NotContains(t, out+errOut, "s3cr3tpw")
}

package ferryhttp_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryhttp"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// Two transfers between the same two accounts, in opposite directions,
// each locking its source row and then, once both hold one, its
// destination: the database breaks the deadlock by failing one of them
// (MariaDB 1213, PostgreSQL 40P01). Its handler hands the error back with
// ferryhttp.Fail, and the middleware reruns it in a new transaction, as
// Config.MaxRetries promises: both transfers answer 201 and each applies
// once, however many times the rerun deadlocks again. SQLite has one
// writer at a time and no deadlock to break.
func TestDeadlockedHandlerIsRerunThroughFail(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mysql", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := newBed(t, kind)
			accounts := testsvc.Name("acct_")
			_, err := b.db.Exec("CREATE TABLE " + accounts + " (id VARCHAR(8) PRIMARY KEY, balance BIGINT NOT NULL)")
			require.NoError(t, err)
			t.Cleanup(func() { _, _ = b.db.Exec("DROP TABLE " + accounts) })
			_, err = b.db.Exec("INSERT INTO " + accounts + " (id, balance) VALUES ('a', 100), ('b', 100)")
			require.NoError(t, err)

			var (
				entries  atomic.Int32
				both     = make(chan struct{})
				failed   atomic.Int32
				holdOnce sync.Once
			)
			debit := b.q("UPDATE " + accounts + " SET balance = balance - ? WHERE id = ?")
			credit := b.q("UPDATE " + accounts + " SET balance = balance + ? WHERE id = ?")
			logs := &testsvc.LogBuffer{}
			k := b.newKeys(t, func(c *ferryhttp.Config) {
				c.Logger = slog.New(slog.NewTextHandler(logs, nil))
			})
			mux := http.NewServeMux()
			mux.Handle("POST /transfers", k.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var tr struct {
					From, To string
					Amount   int
				}
				if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				tx, _ := ferryhttp.Tx[*sql.Tx](r.Context())
				if _, err := tx.ExecContext(r.Context(), debit, tr.Amount, tr.From); err != nil {
					ferryhttp.Fail(r.Context(), err) // rerun if it is a deadlock, else 503 and the key released
					return
				}
				// The first two attempts wait for each other, each
				// holding its source row: then each wants the other's.
				if entries.Add(1) <= 2 {
					if entries.Load() == 2 {
						holdOnce.Do(func() { close(both) })
					}
					select {
					case <-both:
					case <-time.After(20 * time.Second):
					}
				}
				if _, err := tx.ExecContext(r.Context(), credit, tr.Amount, tr.To); err != nil {
					failed.Add(1)
					ferryhttp.Fail(r.Context(), err)
					// Written after Fail: discarded, never the answer.
					http.Error(w, "the handler's own answer after Fail", http.StatusTeapot)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(`{"from":"` + tr.From + `","to":"` + tr.To + `"}`))
			})))
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)

			transfer := func(key, body string) (reply, error) {
				req, err := http.NewRequest(http.MethodPost, srv.URL+"/transfers", strings.NewReader(body))
				if err != nil {
					return reply{}, err
				}
				req.Header.Set(ferryhttp.HeaderKey, key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return reply{}, err
				}
				defer resp.Body.Close()
				var buf bytes.Buffer
				_, err = buf.ReadFrom(resp.Body)
				return reply{Status: resp.StatusCode, Header: resp.Header, Body: buf.Bytes()}, err
			}
			var wg sync.WaitGroup
			replies := make([]reply, 2)
			errs := make([]error, 2)
			for i, body := range []string{`{"From":"a","To":"b","Amount":10}`, `{"From":"b","To":"a","Amount":3}`} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					replies[i], errs[i] = transfer("t-"+string(rune('1'+i)), body)
				}()
			}
			wg.Wait()
			for i := range replies {
				require.NoError(t, errs[i])
				require.Equal(t, http.StatusCreated, replies[i].Status, "transfer %d: %s\n%s", i+1, replies[i].Body, logs.Lines())
			}
			// One victim or more: a victim's rerun may take its source
			// row before the winner, woken from its wait for that row,
			// takes it, and deadlock with it again (seen under load).
			// What holds under any scheduling: every victim ran again,
			// once per deadlock, and each transfer applied once (below).
			victims := failed.Load()
			t.Logf("deadlock victims: %d", victims)
			require.GreaterOrEqual(t, victims, int32(1), "a transfer was the deadlock's victim")
			require.Equal(t, 2+victims, entries.Load(), "each victim ran again, once per deadlock\n%s", logs.Lines())
			require.Len(t, logs.Lines("rerun after a transient database error"), int(victims), "a rerun per victim")

			var a, bal int64
			require.NoError(t, b.db.QueryRow("SELECT balance FROM "+accounts+" WHERE id = 'a'").Scan(&a))
			require.NoError(t, b.db.QueryRow("SELECT balance FROM "+accounts+" WHERE id = 'b'").Scan(&bal))
			require.Equal(t, []int64{93, 107}, []int64{a, bal}, "each transfer applied once, the victim's first attempt rolled back")

			// Each key now replays its one answer.
			for i, body := range []string{`{"From":"a","To":"b","Amount":10}`, `{"From":"b","To":"a","Amount":3}`} {
				again, err := transfer("t-"+string(rune('1'+i)), body)
				require.NoError(t, err)
				require.Equal(t, "true", again.Header.Get(ferryhttp.HeaderReplayed))
				require.Equal(t, replies[i].Body, again.Body)
			}
			require.Equal(t, 2+victims, entries.Load(), "the replays ran nothing")
		})
	}
}

// A client that gives up before its request completes is normal client
// behaviour: logged at INFO, never at ERROR; nothing of the request is
// kept and its retry runs it.
func TestClientThatLeavesIsNotAnError(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, b *bed) {
		logs := &testsvc.LogBuffer{}
		k := b.newKeys(t, func(c *ferryhttp.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
		var (
			calls   atomic.Int32
			inside  = make(chan context.Context, 1)
			release = make(chan struct{})
		)
		t.Cleanup(func() {
			select {
			case <-release:
			default:
				close(release)
			}
		})
		mux := http.NewServeMux()
		mux.Handle("POST /payments", k.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx, _ := ferryhttp.Tx[*sql.Tx](r.Context())
			if _, err := tx.ExecContext(r.Context(), b.q("INSERT INTO "+b.payments+" (id, order_id, amount) VALUES (?, 'o-1', 10)"), randHex()); err != nil {
				ferryhttp.Fail(r.Context(), err)
				return
			}
			if calls.Add(1) == 1 {
				inside <- r.Context()
				<-release
			}
			w.WriteHeader(http.StatusCreated)
		})))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/payments", strings.NewReader(`{}`))
			req.Header.Set(ferryhttp.HeaderKey, "k")
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		reqCtx := <-inside
		cancel() // the client's timeout
		require.Error(t, <-done)
		select {
		case <-reqCtx.Done(): // the server saw the client leave
		case <-time.After(20 * time.Second):
			t.Fatal("the server never saw its client leave")
		}
		close(release)
		testsvc.WaitFor(t, 20*time.Second, func() bool { return len(logs.Lines("abandoned by its client")) > 0 },
			func() string { return fmt.Sprintf("the abandoned request's log line; logs: %q", logs.Lines()) })
		require.Empty(t, logs.Lines("level=ERROR"))
		require.Equal(t, 0, b.charged(t, "o-1"), "nothing of the abandoned request is kept")
		r := post(t, srv.URL, "k", `{}`)
		require.Equal(t, http.StatusCreated, r.Status, "the key was released: its retry runs")
		require.Equal(t, 1, b.charged(t, "o-1"))
	})
}

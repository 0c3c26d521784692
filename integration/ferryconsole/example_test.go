package ferryconsole_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferryconsole"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
)

// The console mounted under /console/ in a service of your own, with
// basic authentication, on a SQLite outbox and inbox.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ferryconsole-example-")
	defer os.RemoveAll(dir)
	store, err := ferrysqlite.Open(ctx, "sqlite://"+filepath.Join(dir, "app.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	inbox, err := ferrysqlite.NewInbox(store.DB(), nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := inbox.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	outbox, err := ferry.NewOutbox(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	tx, err := store.DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := outbox.EnqueueTx(ctx, tx, ferry.Event{AggregateType: "order", AggregateID: "42", Type: "OrderPaid",
		Payload: json.RawMessage(`{"order_id":42}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	console, err := ferryconsole.New(ferryconsole.Config{
		Outboxes:     map[string]ferrystore.Admin{"orders": store},
		Inboxes:      map[string]ferrystore.InboxStore{"app": inbox},
		Authenticate: ferryconsole.BasicAuth("oncall", "correct horse battery staple"),
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/console/", http.StripPrefix("/console", console))
	srv := httptest.NewServer(mux) // your service's server
	defer srv.Close()

	get := func(user, password string) *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+"/console/", nil)
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		return res
	}
	res := get("", "")
	res.Body.Close()
	fmt.Println(res.StatusCode, res.Header.Get("WWW-Authenticate"))
	res = get("oncall", "correct horse battery staple")
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Println(res.StatusCode, strings.Contains(string(body), "Outbox orders"))
	// Output:
	// 401 Basic realm="ferry console", charset="UTF-8"
	// 200 true
}

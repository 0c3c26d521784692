package ferrypgoutput_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/ferrydev/ferry/ferrylog/ferrypgoutput"
	"github.com/ferrydev/ferry/ferrystore"
)

// A feed on the outbox table of a PostgreSQL with wal_level = logical:
// Check creates the publication and the slot, Stream reports the events
// that became NEW, and Flushed lets the server discard the WAL that was
// handled. A relay (ferry.RelayConfig.Feed) does all of this itself.
func ExampleNew() {
	feed, err := ferrypgoutput.New(&ferrypgoutput.Config{
		URL:   "postgres://ferry:secret@127.0.0.1:5432/shop?sslmode=disable",
		Table: "outbox_event",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer feed.Close()
	fmt.Println(feed.Source())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := feed.Check(ctx); errors.Is(err, ferrystore.ErrLogGap) {
		// The slot was invalidated: start over, and read the table for
		// what the log lost.
		err = feed.Reset(ctx)
		if err != nil {
			log.Fatal(err)
		}
	} else if err != nil {
		log.Fatal(err) // names what is missing and its fix
	}
	from, err := feed.Position(ctx)
	if err != nil {
		log.Fatal(err)
	}
	err = feed.Stream(ctx, from, func(ctx context.Context, b ferrystore.LogBatch) error {
		for _, e := range b.Events {
			fmt.Println("claim", e.ID, "attempts", e.Attempts)
		}
		feed.Flushed(b.Pos) // after the checkpoint is saved
		return nil
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

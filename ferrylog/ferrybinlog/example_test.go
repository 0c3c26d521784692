package ferrybinlog_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/ferrydev/ferry/ferrylog/ferrybinlog"
	"github.com/ferrydev/ferry/ferrystore"
)

// Stream the outbox events that become NEW, checkpointing each batch's
// position. A relay does this for you (ferry.RelayConfig.Feed); this is
// the feed on its own, against a MariaDB with its binlog on.
func Example() {
	feed, err := ferrybinlog.New(&ferrybinlog.Config{
		URL:   "mysql://relay:secret@127.0.0.1:3307/shop",
		Table: "outbox_event",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer feed.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := feed.Check(ctx); err != nil {
		log.Fatal(err) // names what to change: log_bin, binlog_format, a GRANT ...
	}
	from, err := feed.Position(ctx) // or the checkpoint saved last time
	if err != nil {
		log.Fatal(err)
	}
	err = feed.Stream(ctx, from, func(ctx context.Context, b ferrystore.LogBatch) error {
		for _, e := range b.Events {
			fmt.Println("new event", e.ID, "attempts", e.Attempts)
		}
		feed.Flushed(b.Pos) // after saving b.Pos as the checkpoint
		return nil
	})
	switch {
	case errors.Is(err, ferrystore.ErrLogGap):
		log.Print("the binlog was purged past the checkpoint: read the table instead")
	case errors.Is(err, context.DeadlineExceeded):
	case err != nil:
		log.Print(err)
	}
}

// Command shop runs one process of ferry's reference shop (examples/shop):
// the order service, the relay, the points consumer or the SMS consumer,
// with fault injection that ferry's own binary does not have. The chaos
// suite builds and runs it; `ferry demo` runs the same roles.
//
//	shop setup  --orders-db URL --points-db URL
//	shop orders --orders-db URL --first 1 --last 400 --rate 50 [--crash-at order.after-commit:100]
//	shop relay  --database-url URL --broker-url URL [--stream SHOP] [--crash-at relay.after-publish:3] [--lose-confirm-pct 3] [--pause-at relay.after-publish=FILE]
//	shop points --points-db URL --broker-url URL [--crash-at consumer.after-handle:10]
//	shop sms    --points-db URL --broker-url URL --gateway URL [--crash-at inbox.before-commit:10]
//	shop check  --orders-db URL --points-db URL --gateway URL
//
// SIGTERM or SIGINT stops a process cleanly. Exit status: 0 done, 1
// failed, 2 bad role or flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ferrydev/ferry/examples/shop"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := shop.RunRole(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "shop:", err)
	if errors.Is(err, shop.ErrUsage) {
		os.Exit(2)
	}
	os.Exit(1)
}

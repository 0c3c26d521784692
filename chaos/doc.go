// Package chaos is ferry's fault-injection suite: it builds the reference
// shop's binary (examples/shop/cmd/shop), runs it as separate processes
// against real databases and a real broker, injects one kind of fault per scenario — killed processes,
// crash points, paused relays, broken connections (toxiproxy, in-process),
// broker restarts, COMMITs cut off on the wire, duplicate storms, poison —
// then heals everything, waits until the system is quiet, and checks the
// result against the ground truth in the databases: nothing lost, nothing
// applied twice, nothing applied that never committed.
//
// It lives in a module of its own so that toxiproxy and its dependencies
// stay out of ferry's go.mod. Run it with `go run ./cmd/chaos` from this
// directory (full size), or `go test` (reduced size, as CI does).
package chaos

// Package ferrymem is ferry's in-memory database: an outbox store
// (ferrystore.Driver[*Tx], with the operator's ferrystore.Admin) and an
// inbox store (ferrystore.IdempotencyDriver[*Tx]) that keep their tables in
// the process, and pass the conformance suites every SQL store passes
// (ferrystoretest: Exercise, ExerciseInbox, ExerciseKeys), all but the
// cases that need SQL or a claim in progress. It imports nothing but the
// standard library and ferry's core.
//
// It is for tests: a user's unit tests of the code that enqueues events or
// consumes them, which need ferry's real behaviour and no database
// server; ferry's own behaviour tests of the relay and the inbox; and the
// runnable examples of the documentation.
//
//	db := ferrymem.NewDB(nil)
//	store, _ := ferrymem.New(db, nil)     // the outbox table
//	inbox, _ := ferrymem.NewInbox(db, nil) // the inbox's tables
//	outbox, _ := ferry.NewOutbox(store, nil)
//
//	tx, _ := db.Begin(ctx)
//	outbox.EnqueueTx(ctx, tx, ferry.Event{Type: "OrderPaid", Payload: body})
//	tx.Commit()
//
// # What it keeps of a database
//
// A DB is one database; the Stores and Inboxes built on it are its tables,
// and one transaction (Begin) writes any of them. What a transaction
// writes is seen by nobody else until it commits, and vanishes if it rolls
// back. The semantics are the SQL stores':
//
//   - An aggregate's events are numbered in enqueue order, and its
//     enqueuers serialised until their transactions end, as the SQL
//     stores' sequence row lock serialises them.
//   - A claim is one atomic step: two claims never take the same event. It
//     takes available NEW events oldest first, sets them SENDING under its
//     token with a lease and one more attempt; ordered claims take an
//     aggregate's next event only once the one before it is SENT or
//     DISCARDED. Every status change is an edge of ferrytype.Transitions,
//     and those made under a token are fenced by it. An event a claim
//     cannot turn into a message (written by Store.Enqueue directly, past
//     the Outbox's checks) goes to DEAD with its reason.
//   - An inbox marker's key is a unique key: a second transaction
//     inserting it waits for the first to end, then fails with an error in
//     ferrytype.ErrDuplicate if the first committed, and goes on if it
//     rolled back. A version of the order guard stays locked until the
//     transaction ends; so does an idempotency key being completed.
//   - Two transactions waiting for each other's locks are a deadlock: one
//     of them fails with an error in ferrytype.ErrLockConflict and
//     ErrRetryable, which the inbox runs again, as on a SQL database.
//   - Every time the stores stamp or compare with is the database clock,
//     DBConfig.Clock: a test moves time (a lease's end, a retry's delay, a
//     lease's takeover, a relay's age) by moving its clock. Times the SQL
//     stores convert to the reader's clock (a relay's beats, a lease's
//     end) are converted the same way.
//
// The ferrystore.Executor a transaction unwraps to (UnwrapTx) runs no SQL:
// its Exec and Query fail, naming ferrymem. The stores recognise it and act
// on the transaction. A test's own business state takes part in the
// transaction through Tx.OnCommit: a function that runs when, and only if,
// the transaction commits, together with its markers and events. Rows a
// hand-written INSERT or UPDATE would leave (a malformed row, a lease
// taken by a person) are written with InsertRaw and UpdateRaw.
//
// # What it does not
//
// Nothing is durable: the data lives as long as the DB value, in one
// process. There is no SQL, no schema and no migration: Migrate does
// nothing, Migrations is empty, CheckSchema reports the table current.
// Admin.MissingEvents, which reads a business table, fails with an error in
// ferrytype.ErrUndefinedTable: the database holds no business tables. No
// claim in progress leaves an event locked and still NEW, since claims
// are atomic. The log relay has no feed of it. Every operation takes the
// DB's one lock, so it is quick for tests and never a load test's
// measure of a database.
package ferrymem

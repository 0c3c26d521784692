// Package ferry carries business events from a service's database to a
// message broker without losing a committed event, through crashes,
// timeouts, lost confirms and redeliveries.
//
// An Outbox writes events inside the caller's own transaction (EnqueueTx),
// so an event exists exactly when the business change it describes
// committed. A Relay claims committed events in batches, publishes them,
// and marks each SENT only once the broker confirmed it. Every step is
// at-least-once; the event id is stable, so the broker (JetStream's
// Nats-Msg-Id window) or the consumer (ferry's inbox) recognises a
// republished event as the duplicate it is.
//
// # Guarantees
//
// What ferry promises, and the test that shows each:
//
//   - Atomicity with the business change: EnqueueTx writes in the caller's
//     transaction; a rollback leaves no event, a commit leaves all of them.
//     Bad input (invalid JSON, a payload over the cap, a missing type) is
//     rejected before anything is written.
//     (ferrystoretest: RollbackWritesNothing, BadInputWritesNothing)
//
//   - No loss: an event leaves the NEW/SENDING states only as SENT, after
//     a broker confirm of that very message, or as DEAD, after the retry
//     policy gave up, with its last error. A relay that crashes at any
//     point leaves leases that expire; the sweeper returns them.
//     (TestRelayCrashWindows, TestRelayProcessKilledAtCrashPoint in
//     cmd/ferry, which SIGKILLs a relay process mid-batch)
//
//   - Fencing: a relay whose lease expired cannot overwrite the outcome of
//     the claim that replaced it; its late mark updates 0 rows, is logged
//     and counted, and counts neither as dead nor as retried.
//     (TestRelayLateMarkIsFenced, TestRelayFencedFailureCountsNeitherDeadNorRetried)
//
//   - One state machine: every change of an event's status is an edge of
//     ferrytype.Transitions, made by one statement conditional on the
//     edge's source status (and, for SENDING rows, the lease token); SENT
//     is terminal but for retention's purge, and a DISCARDED row leaves
//     only by a purge or an operator's restore (back to DEAD).
//     (ferrystoretest: Transitions)
//
//   - Stable ids: a retry, a sweep or a restart republishes the same event
//     id; it is the broker message id. (TestRelayCrashWindows)
//
//   - Unknown is unknown: a publish whose outcome cannot be known (timeout,
//     connection loss, cancelled context) is never marked SENT and never
//     treated as a failure that did not reach the broker: it is retried,
//     and the consumer must absorb the duplicate. Unroutable messages
//     (JetStream: no stream for the subject) are not successes.
//     (ferrybrokertest: UnroutableIsNeverConfirmed,
//     BrokenConnectionIsUnknownNeverConfirmed)
//
//   - Order per aggregate (RelayConfig.Ordered): with any number of relays,
//     event N+1 of an aggregate is handed to the broker only after event N
//     was confirmed. A DEAD event holds back the rest of its aggregate
//     until it is retried or discarded. (TestRelayOrderedUnderFailures,
//     ferrystoretest: OrderedClaimSkipsPastALockedHead)
//
//   - One effect per operation: Inbox.Process commits a marker keyed by
//     (consumer, business key) in the same transaction as the business
//     effect. A redelivery is a duplicate; the same key with other fields
//     is a conflict, recorded and parked. Concurrent deliveries are
//     arbitrated by the unique key. (ferrystoretest: ExerciseInbox,
//     including 16 goroutines delivering 1,000 keys at once;
//     TestConsumerKilledBetweenCommitAndAck, which SIGKILLs a consumer
//     process after its commit and before its ack)
//
//   - Side effects outside the database run as tasks, at least once, with
//     their own idempotency key. (TestTasksExecuteEachKeyOnceAcrossCrashes)
//
// What ferry does not promise: exactly-once delivery. SENT means "the
// broker took responsibility", never "a consumer processed it"; a relay
// that loses its lease mid-publish may still publish. Consumers make the
// effect idempotent.
//
// # Modules
//
// This package, ferrytype, ferrystore, ferrybroker, ferryadmin, ferryhttp
// and the conformance suites are the core module, which requires only uuid
// (and testify, for the suites). Each store, each broker and each plugin
// (ferryprom, ferryotel, ferryredis, the console) is a module of its own,
// requiring the core and its own client, so that a program builds and
// lists in its go.sum only the clients it imports. All are tagged together
// with one version.
//
// # Stores
//
// ferrystore/ferrymysql (MySQL 8, MariaDB 10.6+), ferrystore/ferrypg
// (PostgreSQL, through pgx or database/sql) and ferrystore/ferrysqlite (the
// embedded default, pure Go). The schema extends the classic outbox_event
// table: a hand-written INSERT of its original columns still works. All
// times come from the database clock. Claims use SELECT ... FOR UPDATE
// SKIP LOCKED and a fresh lease token per claim; the claim transaction ends
// before any broker call. ferrystore/ferrymem, in the core module, keeps
// the same tables in memory with the same semantics, for tests.
//
// # Brokers
//
// ferrybroker/ferryamqp publishes to RabbitMQ (persistent, mandatory
// messages with pipelined publisher confirms; durable quorum queues by
// default) and consumes from it, acking a delivery only after its handler
// committed. ferrybroker/ferrynats publishes to NATS JetStream.
// ferrybroker/ferrykafka publishes to Kafka through franz-go (an
// idempotent producer with acks from every in-sync replica, one record per
// event keyed by its aggregate id) and consumes it in a consumer group,
// committing offsets only past handled records. Publishers
// implement ferrybroker.Publisher and report one Outcome per message:
// confirmed, returned (unroutable), rejected or unknown.
//
// # Wake-ups
//
// A relay whose lanes find events claims again at once. Once they run dry,
// it probes the store (Store.Ready: one read of the pending index, no
// locks) every MinPollInterval (1ms), lengthening the interval by a
// quarter at each empty probe up to PollInterval (80ms): a relay deployed
// in its own process notices new events within milliseconds while busy,
// and an idle one makes about one query per PollInterval, whatever its
// number of lanes. It also wakes at once on a Wakeup rung by an Outbox in
// the same process and, on PostgreSQL, on the NOTIFY that EnqueueTx sends
// inside the transaction (delivered at commit) when the store has
// ferrypg.Config.Notify.
//
// # Operations
//
// The core emits through small hook interfaces (HookEnqueue on the Outbox;
// HookClaim, HookPublish, HookFenced, HookSweep, HookSettle,
// HookSettleDestinations, HookRelease and HookHeartbeat on the Relay;
// HookInbox on the Inbox), detected by type assertion, and never
// imports Prometheus or OpenTelemetry. Every relay also records itself in
// its table's heartbeat table (<table>_relay, RelayConfig.Heartbeat): id,
// host, pid, version, events in flight, broker connected, stamped by the
// database clock, deleted on Stop; ferry status and ferryadmin.Relays tell
// from it which relays are alive. Package ferryprom implements the
// relay hooks as Prometheus metrics and exports each table's state, above
// all the age of its oldest pending event, and on the consumer side the
// inbox outcomes, handler and task results, and the open conflicts;
// package ferryotel carries the trace context from the enqueuing
// transaction, through every publish attempt, to the consumer. Stores also
// implement ferrystore.Admin, on which the ferry command builds status,
// dead-event handling (retry with the same id, or discard with an audit
// trail), reconciliation and retention; on a consumer's inbox tables it
// lists conflicts and records a person's decision on them (a record only:
// nothing is applied), checks that SENT events had their downstream effect
// (a marker under their business key), and purges markers no sooner than
// the replay window. docs/operations.md is the runbook.
//
// # Testing
//
// Every store runs ferrystore/ferrystoretest and every publisher and
// consumer ferrybroker/ferrybrokertest, against real servers; both suites
// import only the core and testify, so a store or publisher of yours runs
// them without compiling ferry's test bed. Tests skip when a service is
// unreachable unless FERRY_REQUIRE_SERVICES=1. The tests that need more than
// one adapter's client live in the integration module of the repository.
// ferrystore/ferrymem passes the store suites with no server: a unit test
// of code that enqueues or consumes events runs on it, its business state
// committed with the transaction (ferrymem.Tx.OnCommit).
package ferry

// Package ferryprom exports ferry's metrics to Prometheus. It is a plugin:
// the core never imports Prometheus; Metrics attaches to relays and
// ConsumerMetrics to inboxes through the hook interfaces of package ferry,
// ConsumerMetrics to broker consumers through those of package ferrybroker,
// ConsumerMetrics also wraps task handlers, and OutboxCollector
// and ConflictCollector read the outbox and conflict tables through their
// stores. Each registers with the prometheus.Registerer it is given, never
// with the global one.
//
// # Relay metrics (Metrics, from the relay's hooks)
//
// Every series has the label table (the outbox table). The label
// destination (where the events are published: their destination, or their
// type) takes at most Config.MaxDestinations values, 100 by default, across
// the Metrics; later destinations count under "_other", events whose
// destination cannot be read (malformed rows) under "_unknown".
//
//	ferry_relay_claims_total                              counter    claim statements that returned events
//	ferry_relay_claimed_events_total                      counter    events claimed (one per publish attempt)
//	ferry_relay_claim_duration_seconds                    histogram  claim transactions that returned events
//	ferry_relay_publish_outcomes_total{outcome,destination} counter  publish attempts by outcome: confirmed, returned, rejected, unknown
//	ferry_relay_publish_duplicates_total                  counter    confirms the broker flagged as duplicates (a republished event)
//	ferry_relay_publish_batch_duration_seconds            histogram  one batch's publish, until every message had an outcome
//	ferry_relay_commit_to_confirm_seconds                 histogram  event created_at (database clock) to the broker's confirm
//	ferry_relay_confirm_attempts                          histogram  attempts an event needed until it was confirmed
//	ferry_relay_sent_total{destination}                   counter    events marked SENT
//	ferry_relay_retries_total                             counter    events put back to NEW (failed attempt or expired lease)
//	ferry_relay_dead_total{destination}                   counter    events moved to DEAD
//	ferry_relay_lease_expiries_total                      counter    leases returned by the sweeper
//	ferry_relay_fenced_total                              counter    outcome marks that found the lease gone (0 rows)
//	ferry_relay_released_total                            counter    events given back unsent (broker unreachable), no attempt spent
//	ferry_relay_heartbeat_failures_total                  counter    relay heartbeats that could not be recorded
//
// # Build information (RegisterBuildInfo, NewBuildInfo)
//
//	ferry_build_info{version,revision,goversion}          gauge    always 1: which ferry runs
//
// # Outbox metrics (OutboxCollector, from the database)
//
//	ferry_outbox_oldest_pending_age_seconds               gauge    age of the oldest NEW or SENDING event: the SLO
//	ferry_outbox_events{status}                           gauge    rows by status: new, sending, dead
//	ferry_outbox_ready_events                             gauge    NEW rows available now
//	ferry_outbox_destination_pending_events{destination}  gauge    pending rows per destination (opt-in)
//	ferry_outbox_destination_oldest_pending_age_seconds   gauge    oldest pending age per destination (opt-in)
//	ferry_outbox_up                                       gauge    1 if the table's last poll succeeded
//	ferry_outbox_last_poll_timestamp_seconds              gauge    time of the last successful poll
//	ferry_outbox_poll_errors_total                        counter  failed polls
//
// # Broker connectivity (RegisterBrokerConnected, from the publisher)
//
//	ferry_broker_connected{broker}                        gauge    1 while the broker connection is up, 0 while down or not opened yet
//
// # Consumer metrics (ConsumerMetrics: inbox and consumer hooks, task wrappers)
//
// Inbox series have the label consumer (the inbox's consumer name), broker
// consumer series the label consumer too (the consumer's
// ConsumerConfig.Name: give it the inbox's name to line the two up); task
// series the label type (the task type).
//
//	ferry_inbox_operations_total{outcome}             counter    operations by outcome: applied, duplicate, conflict, stale
//	ferry_inbox_operation_duration_seconds{outcome}   histogram  Inbox.Process of operations that reached an outcome
//	ferry_consumer_received_total                     counter    deliveries taken from the broker, redeliveries included
//	ferry_consumer_settled_total{action}              counter    deliveries settled by action: acked, retried, parked, left
//	ferry_consumer_deliveries_total{result}           counter    handler calls by result: ok, transient, poison, canceled
//	ferry_consumer_handle_duration_seconds{result}    histogram  one handler call
//	ferry_consumer_in_flight_deliveries               gauge      handler calls running now
//	ferry_consumer_rewinds_total                      counter    partitions reset to an earlier offset after the brokers lost records (Kafka)
//	ferry_consumer_rewound_records_total              counter    records read again because of those resets
//	ferry_task_executions_total{result}               counter    task handler executions by result: ok, transient, poison, canceled
//	ferry_task_duration_seconds{result}               histogram  one task handler execution
//
// # Open conflicts (ConflictCollector, from a consumer's database)
//
//	ferry_inbox_open_conflicts{consumer}               gauge    open conflicts: they wait for a person
//	ferry_inbox_conflicts_up                           gauge    1 if the last poll succeeded
//	ferry_inbox_conflicts_last_poll_timestamp_seconds  gauge    time of the last successful poll
//	ferry_inbox_conflicts_poll_errors_total            counter  failed polls
//
// A conflict is the outcome that needs a person: the inbox recorded it and
// the delivery was parked (ferry conflicts list shows it). The counter
// says when conflicts happen; the open-conflicts gauge stays up until each
// is resolved, which is what an alert wants. An operation
// that ended in an error was rolled back and has no outcome; the consumer
// hooks count its handler call as transient. Tasks also run through a relay (a task
// worker is one), so Metrics in the worker's RelayConfig.Hooks counts them
// by task table like events, and OutboxCollector on the task table gives
// the age of the oldest pending task.
//
// The age of the oldest pending event is the one number that says whether
// the outbox keeps its promise: it grows when the broker is down, when the
// relays are stopped or too slow, when events keep failing, and whatever
// the cause, consumers see the delay. Alert on it; see docs/operations.md
// for a rule.
//
// # Cost
//
// The hooks run on the relay's (or the consumer's) goroutines; each does a
// few atomic additions and histogram observations per event and takes no
// lock once its table, consumer or task type was seen. OutboxCollector polls each table every Interval in
// the background and a scrape only reads the last snapshot; see its
// documentation for the query's cost.
//
// # Adding metrics
//
// Each group of hooks lives in its own file and registers its own
// families in its constructor: relay.go for the relay's hooks, outbox.go
// for the tables, inbox.go for the consumer side (labelled by consumer
// name instead of table).
package ferryprom

// Package ferryconsole is ferry's on-call console: a web UI over the
// operator API of ferryadmin, as an http.Handler to mount in a service
// of your own or to run with the ferry console command.
//
//	h, err := ferryconsole.New(ferryconsole.Config{
//		Outboxes:     map[string]ferrystore.Admin{"orders": store},
//		Inboxes:      map[string]ferrystore.InboxStore{"points": inbox},
//		Authenticate: ferryconsole.BasicAuth("oncall", os.Getenv("CONSOLE_PASSWORD")),
//	})
//	mux.Handle("/console/", http.StripPrefix("/console", h))
//
// # Pages
//
//   - Overview: per outbox and task table, the events pending, ready, in
//     flight (SENDING) and DEAD, the age of the oldest pending event, the
//     same per destination, in sentences what needs a person
//     (ferryadmin.Status), and the relays (or task workers) that beat on
//     the table: alive or not, host, version, started, last beat, lanes,
//     events in flight, broker connected; per consumer database, the open
//     conflicts.
//   - DEAD events: filtered by type, destination, aggregate, age and text
//     of the last error, paged, oldest first; grouped by destination and
//     class of error (ferryadmin.SummarizeDead), each group retried or
//     discarded as a whole, the result giving the true totals; an event in
//     full (payload, headers, attempts, the whole last error, the later
//     events of its aggregate it holds back); retry or discard one event or
//     a selection. A discard needs a reason, kept with the events with the
//     operator's name. The DISCARDED events, with who, why and when,
//     restored to DEAD one or a selection at a time.
//   - Conflicts: per consumer database and consumer, the open ones (or
//     all); a conflict's stored and incoming fields side by side and the
//     consumer's marker now; a decision recorded with a note and the
//     operator's name (ferryadmin.ResolveConflicts: it never changes
//     business data).
//   - Inbox: per consumer database, the markers each consumer recorded in
//     the last hour and day (applied, stale) and its open conflicts;
//     every marker counted on request; the database's task table: its
//     counts, pending tasks and DEAD tasks (retried and discarded like
//     events).
//   - Reconcile: the configured checks (ferryadmin.Reconcile) run on a
//     button, and their findings.
//
// # Security
//
// The console serves nothing until a handler is built and mounted. Every
// request but GET or HEAD of HealthPath (200 "ok", no store read, for a
// load balancer's or Kubernetes' probes) is authenticated by
// Config.Authenticate (BasicAuth and
// BearerToken compare in constant time); New refuses a Config without it
// unless Config.Insecure is set. Every request that changes something is a
// POST refused when it comes from another origin
// (http.CrossOriginProtection) or lacks the form's token: an HMAC over the
// operator and the time the form was rendered, keyed by Config.Secret.
// Config.ReadOnly hides every action (retry, discard, restore, resolve)
// and refuses its requests with 403.
// Every action is logged with the operator's name, what it did and how
// many rows changed. Responses carry a Content-Security-Policy
// (default-src 'self', no inline script, frame-ancestors 'none'),
// X-Frame-Options DENY, nosniff and no-referrer. Every input is validated
// and a bad one answered 400 with what was wrong; a database error is
// answered 500 with a reference to the console's log, never with the
// error's text. Pages show no database URL but redacted ones.
//
// The pages are rendered on the server with html/template; the
// stylesheet and a small script (select all) are embedded. Every link is
// relative, so the handler works under any prefix.
package ferryconsole

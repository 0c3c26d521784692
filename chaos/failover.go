package chaos

import (
	"context"
	"fmt"
	"time"
)

// dbPair is a database server of the run's own with a replica
// (Options.Failover): the db-failover scenario kills its primary under
// the running system and makes the replica the primary, as production's
// failover does; the processes reach whichever is the primary the way
// production reaches a failing-over database.
type dbPair interface {
	// adminURL is the URL of the pair's database "test", the way the
	// processes reach the primary (PostgreSQL: a multi-host URL with
	// target_session_attrs=read-write; MariaDB: a proxy that the
	// failover switches to the new primary).
	adminURL() string
	// failover kills the primary and promotes the replica, and returns
	// once the new primary takes writes, with a line that says what
	// happened (the nodes, and the evidence that the primary moved).
	failover(ctx context.Context) (string, error)
	close()
}

// startPair starts the pair for db in dir.
func startPair(ctx context.Context, o Options, dir string) (dbPair, error) {
	switch o.DB {
	case "postgres":
		return startPGPair(ctx, o, dir)
	case "mysql":
		return startMariaDBPair(ctx, o, dir)
	}
	return nil, fmt.Errorf("no failover pair for database %q", o.DB)
}

// DBFailover is the databases' failover: a few seconds into the load the
// primary is killed (SIGKILL) and the replica promoted, under the order
// services, the relays and the consumers' inboxes. With synchronous
// replication (PostgreSQL synchronous_commit=on with the replica as the
// synchronous standby; MariaDB semi-synchronous, AFTER_SYNC) no
// acknowledged COMMIT is lost: the checker finds every order's effects
// once.
var DBFailover = &Scenario{
	Name:        "db-failover",
	ClusterOnly: true,
	About:       "the database primary SIGKILLed and its synchronous replica promoted mid-run, under the order services, the relays and the inboxes",
	faults: func(ctx context.Context, s *system) {
		// Once, early enough that the load runs on the new primary for
		// most of the run.
		select {
		case <-ctx.Done():
			return
		case <-time.After(3 * time.Second):
		}
		s.say("database: failover")
		what, err := s.pair.failover(ctx)
		if err != nil {
			s.say("database failover failed: %v", err)
			return
		}
		s.mu.Lock()
		s.failovers++
		s.mu.Unlock()
		s.say("database: %s", what)
	},
	expect: func(r *Result) []string {
		if r.Counters.Failovers == 0 {
			return []string{"vacuous: the database never failed over"}
		}
		return nil
	},
}

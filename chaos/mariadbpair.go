package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/ferrydev/ferry/examples/shop"
)

// mariaDBPair is a MariaDB primary with a GTID replica of the run's own,
// started from Debian's binaries (mariadb-install-db, mariadbd), and the
// proxy the processes reach the primary through.
//
// The replication is semi-synchronous with the wait point AFTER_SYNC: the
// primary writes a transaction to its binlog, waits until the replica has
// it in its relay log, and only then commits it in InnoDB and answers the
// client. A COMMIT the client saw succeed is therefore on the replica when
// the primary dies; one whose answer never came may or may not be, which
// is the unknown outcome ferry must absorb either way. The timeout is long
// (semiSyncTimeout), so that the primary does not fall back to
// asynchronous replication under a slow replica without anyone noticing:
// failover reports the primary's counters of commits that were and were
// not acknowledged.
//
// The replica reaches the primary through a proxy of its own too, the
// replication link, which failover holds before the kill: the kill then
// finds COMMITs waiting for the replica's acknowledgement (their clients
// get no answer), rather than hoping to hit one in the few milliseconds a
// COMMIT waits on loopback.
type mariaDBPair struct {
	dir     string
	primary *mariaDBNode
	replica *mariaDBNode
	proxy   *switchProxy // the processes' way to the primary
	link    *switchProxy // the replica's way to the primary

	mu         sync.Mutex
	failedOver bool
}

// mariaDBNode is one server of the pair.
type mariaDBNode struct {
	name string
	dir  string // datadir, binlogs, tmpdir, socket
	addr string // 127.0.0.1:port
	proc *shop.Proc
	db   *sql.DB // root, for the harness's own statements
}

// semiSyncTimeout is the primary's rpl_semi_sync_master_timeout: longer
// than any run, so that a replica that stops acknowledging stalls the
// load (which the harness reports) rather than turning the replication
// asynchronous.
const semiSyncTimeout = 10 * time.Minute

// startMariaDBPair starts a MariaDB primary with a semi-synchronous GTID
// replica in dir, and a proxy to the primary, and returns once the
// replica is connected with semi-sync active and the database "test"
// exists on both.
func startMariaDBPair(ctx context.Context, o Options, dir string) (_ dbPair, err error) {
	p := &mariaDBPair{dir: dir}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	asRoot := os.Geteuid() == 0
	if asRoot {
		// The servers run as user mysql (mariadbd does not run as root
		// unless told to), which must reach their directories: the run's
		// directory is MkdirTemp's, mode 0700.
		for _, d := range []string{filepath.Dir(dir), dir} {
			if err := mariaDBSearchable(d); err != nil {
				return nil, err
			}
		}
	}
	mariadbd, err := exec.LookPath("mariadbd")
	if err != nil {
		mariadbd = "/usr/sbin/mariadbd"
	}
	var ports []string
	for len(ports) < 2 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		// Two ports free a moment ago may be one port.
		if !slices.Contains(ports, port) {
			ports = append(ports, port)
		}
	}
	for i, name := range []string{"primary", "replica"} {
		port := ports[i]
		n := &mariaDBNode{name: "mariadb-" + name, dir: filepath.Join(dir, name), addr: "127.0.0.1:" + port}
		n.proc = &shop.Proc{Name: n.name, Bin: mariadbd, Log: o.Log, Args: n.serverArgs(port, i+1, asRoot)}
		if i == 0 {
			p.primary = n
			n.proc.Args = append(n.proc.Args, "--rpl-semi-sync-master-enabled=ON", "--rpl-semi-sync-master-wait-point=AFTER_SYNC",
				"--rpl-semi-sync-master-timeout="+strconv.FormatInt(semiSyncTimeout.Milliseconds(), 10))
		} else {
			p.replica = n
			// Read-only until promoted: nothing but the replication
			// writes to it while it is a replica.
			n.proc.Args = append(n.proc.Args, "--rpl-semi-sync-slave-enabled=ON", "--read-only=ON")
		}
	}
	// The two installs side by side: each is a few seconds of mostly
	// waiting for the disk.
	errs := make(chan error, 2)
	for _, n := range []*mariaDBNode{p.primary, p.replica} {
		go func() { errs <- n.install(ctx, asRoot) }()
	}
	for range 2 {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return nil, err
	}
	for _, n := range []*mariaDBNode{p.primary, p.replica} {
		if err := n.start(ctx); err != nil {
			return nil, err
		}
	}
	if p.link, err = newSwitchProxy(p.primary.addr); err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(p.link.addr())
	if _, err := p.replica.db.ExecContext(ctx, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%s, "+
		"MASTER_USER='root', MASTER_PASSWORD='', MASTER_CONNECT_RETRY=1, MASTER_USE_GTID=slave_pos", host, port)); err != nil {
		return nil, fmt.Errorf("%s: change master: %w", p.replica.name, err)
	}
	if _, err := p.replica.db.ExecContext(ctx, "START SLAVE"); err != nil {
		return nil, fmt.Errorf("%s: start slave: %w", p.replica.name, err)
	}
	if err := p.waitSemiSync(ctx); err != nil {
		return nil, err
	}
	// The processes' database, created on the primary, and waited for on
	// the replica: replication works end to end before the run starts.
	if _, err := p.primary.db.ExecContext(ctx, "CREATE DATABASE test"); err != nil {
		return nil, fmt.Errorf("%s: create database test: %w", p.primary.name, err)
	}
	var pos string
	if err := p.primary.db.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		return nil, fmt.Errorf("%s: %w", p.primary.name, err)
	}
	if err := p.replica.gtidWait(ctx, pos, 30*time.Second); err != nil {
		return nil, err
	}
	if p.proxy, err = newSwitchProxy(p.primary.addr); err != nil {
		return nil, err
	}
	return p, nil
}

// mariaDBSearchable lets every user search directory d (o+x), which
// the servers need of the directories above their own.
func mariaDBSearchable(d string) error {
	fi, err := os.Stat(d)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o001 != 0 {
		return nil
	}
	return os.Chmod(d, fi.Mode().Perm()|0o001)
}

// serverArgs are a node's mariadbd arguments: both nodes have a ROW
// binlog with GTIDs in strict mode and log what they replicate
// (log_slave_updates), so that the replica is a primary like the first
// once promoted, and both make each COMMIT durable on its own
// (innodb_flush_log_at_trx_commit=1, sync_binlog=1): the failover loses
// nothing the replica acknowledged.
func (n *mariaDBNode) serverArgs(port string, serverID int, asRoot bool) []string {
	args := []string{"--no-defaults"} // first, or mariadbd ignores it
	if asRoot {
		args = append(args, "--user=mysql")
	}
	return append(args,
		"--datadir="+filepath.Join(n.dir, "data"), "--tmpdir="+filepath.Join(n.dir, "tmp"), "--port="+port, "--bind-address=127.0.0.1",
		"--socket="+filepath.Join(n.dir, "mysqld.sock"), "--pid-file="+filepath.Join(n.dir, "mysqld.pid"),
		"--server-id="+strconv.Itoa(serverID), "--log-bin="+filepath.Join(n.dir, "log", "binlog"),
		"--relay-log="+filepath.Join(n.dir, "log", "relay"), "--binlog-format=ROW", "--binlog-row-image=FULL",
		"--gtid-strict-mode=ON", "--log-slave-updates=ON", "--skip-slave-start",
		"--innodb-flush-log-at-trx-commit=1", "--sync-binlog=1",
		"--max-connections=300", "--innodb-buffer-pool-size=128M", "--skip-name-resolve")
}

// install creates the node's data directory with mariadb-install-db.
// Each node has a tmpdir of its own: two installs side by side in the
// same one (/tmp) fail now and then on each other's temporary tables.
func (n *mariaDBNode) install(ctx context.Context, asRoot bool) error {
	for _, d := range []string{"data", "log", "tmp"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o750); err != nil {
			return err
		}
	}
	args := []string{"--no-defaults", "--datadir=" + filepath.Join(n.dir, "data"), "--tmpdir=" + filepath.Join(n.dir, "tmp"),
		"--auth-root-authentication-method=normal", "--skip-test-db"}
	if asRoot {
		if err := mariaDBChown(n.dir, "mysql"); err != nil {
			return err
		}
		args = append(args, "--user=mysql")
	}
	out, err := exec.CommandContext(ctx, "mariadb-install-db", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: mariadb-install-db: %w\n%s", n.name, err, mariaDBErrors(out))
	}
	return nil
}

// mariaDBChown gives dir and everything in it to the named user.
func mariaDBChown(dir, name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

// mariaDBErrors picks the lines of mariadb-install-db's output that say
// what went wrong (its last lines are advice), or its first lines.
func mariaDBErrors(out []byte) string {
	var errs []string
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, l := range lines {
		if strings.Contains(l, "ERROR") || strings.Contains(l, "[Warning]") {
			errs = append(errs, l)
		}
	}
	if len(errs) == 0 {
		errs = lines
	}
	return strings.Join(errs[:min(len(errs), 10)], "\n")
}

// start starts the node's server and opens its pool once it answers.
func (n *mariaDBNode) start(ctx context.Context) error {
	if err := n.proc.Start(); err != nil {
		return err
	}
	if err := waitListening(ctx, n.proc, n.addr); err != nil {
		return err
	}
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "tcp", n.addr
	cfg.Timeout = 5 * time.Second
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	n.db = db
	// The port opens before the server takes logins: the first
	// statement is retried for a while.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err = db.PingContext(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil || !n.proc.Running() {
			return fmt.Errorf("%s does not answer: %w; its last lines:\n%s", n.name, err, n.proc.Tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// status reads global status variables.
func (n *mariaDBNode) status(ctx context.Context, like string) (map[string]string, error) {
	rows, err := n.db.QueryContext(ctx, "SHOW GLOBAL STATUS LIKE '"+like+"'")
	if err != nil {
		return nil, fmt.Errorf("%s: show status: %w", n.name, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

// slaveStatus reads SHOW SLAVE STATUS by column name (nil: not a
// replica).
func (n *mariaDBNode) slaveStatus(ctx context.Context) (map[string]string, error) {
	rows, err := n.db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return nil, fmt.Errorf("%s: show slave status: %w", n.name, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	if !rows.Next() {
		return nil, rows.Err()
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i, c := range cols {
		out[c] = string(vals[i])
	}
	return out, rows.Err()
}

// gtidWait waits until the node has applied GTID position pos, at most d.
func (n *mariaDBNode) gtidWait(ctx context.Context, pos string, d time.Duration) error {
	var r sql.NullInt64
	if err := n.db.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", pos, d.Seconds()).Scan(&r); err != nil {
		return fmt.Errorf("%s: master_gtid_wait(%s): %w", n.name, pos, err)
	}
	if !r.Valid || r.Int64 != 0 {
		st, _ := n.slaveStatus(ctx)
		return fmt.Errorf("%s did not apply up to %s within %s (Gtid_Slave_Pos %s, SQL thread %s, last SQL error %q)",
			n.name, pos, d, st["Gtid_Slave_Pos"], st["Slave_SQL_Running"], st["Last_SQL_Error"])
	}
	return nil
}

// waitSemiSync waits, at most 30 s, until the replica's IO thread is
// connected with semi-sync on and the primary counts it as a semi-sync
// client with semi-sync on: from then on every COMMIT waits for it.
func (p *mariaDBPair) waitSemiSync(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		rs, err := p.replica.status(ctx, "Rpl_semi_sync_slave_status")
		if err != nil {
			return err
		}
		ps, err := p.primary.status(ctx, "Rpl_semi_sync_master_%")
		if err != nil {
			return err
		}
		st, err := p.replica.slaveStatus(ctx)
		if err != nil {
			return err
		}
		if rs["Rpl_semi_sync_slave_status"] == "ON" && ps["Rpl_semi_sync_master_status"] == "ON" &&
			ps["Rpl_semi_sync_master_clients"] != "0" && st["Slave_IO_Running"] == "Yes" {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the replica did not connect with semi-sync within 30s: replica semi-sync %s, IO thread %s (%s), "+
				"primary semi-sync %s with %s clients", rs["Rpl_semi_sync_slave_status"], st["Slave_IO_Running"], st["Last_IO_Error"],
				ps["Rpl_semi_sync_master_status"], ps["Rpl_semi_sync_master_clients"])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *mariaDBPair) adminURL() string { return "mysql://root@" + p.proxy.addr() + "/test" }

// failover kills the primary (SIGKILL), lets the replica apply all it
// received, promotes it and switches the proxy to it. The steps are
// bounded on their own: the scenario's ctx ends when the load does, and a
// failover half done would leave the run without a primary.
//
// Before the kill it holds the replication link until COMMITs wait for
// the replica's acknowledgement. After the kill it either delivers what
// the link held (the replica got those transactions, their
// acknowledgements did not reach the primary: they commit on the new
// primary though their clients saw an error) or drops it (the primary
// died before sending them: they never commit), at random. Both are what
// a client whose COMMIT got no answer must expect; neither loses a COMMIT
// that was acknowledged.
func (p *mariaDBPair) failover(ctx context.Context) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failedOver {
		return "", errors.New("the MariaDB pair failed over already: its new primary has no replica")
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	old, repl := p.primary, p.replica

	p.link.hold()
	held := true
	defer func() {
		if held {
			p.link.release()
		}
	}()
	waiting, err := p.waitWaiters(ctx, 2*time.Second)
	if err != nil {
		return "", err
	}

	// What the primary had, just before it dies: its binlog position
	// (which includes transactions still waiting for the replica's
	// acknowledgement) and its semi-sync counters.
	var before string
	if err := old.db.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&before); err != nil {
		return "", fmt.Errorf("%s: %w", old.name, err)
	}
	semi, err := old.status(ctx, "Rpl_semi_sync_master_%")
	if err != nil {
		return "", err
	}
	inFlight, err := old.inFlight(ctx)
	if err != nil {
		return "", err
	}
	if err := old.proc.Signal(syscall.SIGKILL); err != nil {
		return "", fmt.Errorf("kill %s: %w", old.name, err)
	}
	select {
	case <-old.proc.Done():
	case <-ctx.Done():
		return "", fmt.Errorf("%s did not die after SIGKILL: %w", old.name, ctx.Err())
	}
	if err := mariaDBWaitRefused(ctx, old.addr); err != nil {
		return "", fmt.Errorf("%s: %w", old.name, err)
	}
	held = false
	fate := "delivered to the replica"
	if rand.IntN(2) == 0 {
		fate = "dropped"
		p.link.switchTo("") // cuts the replica's connection with what it held
	}
	p.link.release()

	// The replica: its IO thread lost the primary; the SQL thread
	// applies everything the IO thread had received (Gtid_IO_Pos, the
	// last complete transaction in the relay log), which includes every
	// COMMIT the primary acknowledged.
	var st map[string]string
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st, err = repl.slaveStatus(ctx); err != nil {
			return "", err
		}
		if st["Slave_IO_Running"] != "Yes" {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s: the IO thread still runs 30s after the primary died", repl.name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ioPos := st["Gtid_IO_Pos"]
	if ioPos != "" {
		if err := repl.gtidWait(ctx, ioPos, 60*time.Second); err != nil {
			return "", err
		}
	}
	for _, q := range []string{"STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0"} {
		if _, err := repl.db.ExecContext(ctx, q); err != nil {
			return "", fmt.Errorf("%s: %s: %w", repl.name, q, err)
		}
	}
	var after string
	if err := repl.db.QueryRowContext(ctx, "SELECT @@gtid_current_pos").Scan(&after); err != nil {
		return "", fmt.Errorf("%s: %w", repl.name, err)
	}
	cut := p.proxy.switchTo(repl.addr)
	p.primary, p.replica, p.failedOver = repl, nil, true
	p.link.close()

	what := fmt.Sprintf("%s (%s) SIGKILLed with %d COMMITs waiting for the replica's acknowledgement (%s; statements running: %s), "+
		"its port refuses connections; "+
		"%s (%s) promoted and the proxy switched to it (%d connections cut): "+
		"the primary's binlog was at %s before the kill, the replica received up to %s and applied up to %s; "+
		"semi-sync before the kill: %s, %s clients, %s commits acknowledged by the replica, %s not",
		old.name, old.addr, waiting, fate, inFlight, repl.name, repl.addr, cut, before, ioPos, after,
		semi["Rpl_semi_sync_master_status"], semi["Rpl_semi_sync_master_clients"],
		semi["Rpl_semi_sync_master_yes_tx"], semi["Rpl_semi_sync_master_no_tx"])
	if semi["Rpl_semi_sync_master_status"] != "ON" || semi["Rpl_semi_sync_master_no_tx"] != "0" {
		what += " (SOME COMMITS WERE NOT SEMI-SYNC ACKNOWLEDGED: the failover may have lost acknowledged ones)"
	}
	return what, nil
}

// inFlight says which statements the node runs, by database and state
// (the COMMITs the kill cuts off, and the ones queued behind them).
func (n *mariaDBNode) inFlight(ctx context.Context) (string, error) {
	rows, err := n.db.QueryContext(ctx, "SELECT COALESCE(DB, ''), STATE, COUNT(*) FROM information_schema.PROCESSLIST"+
		" WHERE COMMAND = 'Query' AND ID <> CONNECTION_ID() GROUP BY 1, 2 ORDER BY 1, 2")
	if err != nil {
		return "", fmt.Errorf("%s: processlist: %w", n.name, err)
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var db, state string
		var count int
		if err := rows.Scan(&db, &state, &count); err != nil {
			return "", err
		}
		parts = append(parts, fmt.Sprintf("%d in %s %q", count, db, state))
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	return strings.Join(parts, ", "), rows.Err()
}

// waitWaiters waits, with the replication link held, until a session
// waits for the replica's acknowledgement, at most d, and returns how
// many do then (none when the load is idle: the kill goes ahead anyway).
// One is as many as there will be: the session that waits is the leader
// of a binlog group commit, whose other COMMITs wait with it, and the
// COMMITs after them queue behind the group, not yet in the binlog (in
// flight too, and lost with the primary).
func (p *mariaDBPair) waitWaiters(ctx context.Context, d time.Duration) (int, error) {
	deadline := time.Now().Add(d)
	for {
		st, err := p.primary.status(ctx, "Rpl_semi_sync_master_wait_sessions")
		if err != nil {
			return 0, err
		}
		w, _ := strconv.Atoi(st["Rpl_semi_sync_master_wait_sessions"])
		if w > 0 || time.Now().After(deadline) {
			return w, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mariaDBWaitRefused waits, at most 10 s, until a connection to addr is
// refused: the killed server's port is really closed.
func mariaDBWaitRefused(ctx context.Context, addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		} else if errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("port %s not refusing connections 10s after the kill (last: %v)", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *mariaDBPair) close() {
	for _, px := range []*switchProxy{p.proxy, p.link} {
		if px != nil {
			px.close()
		}
	}
	for _, n := range []*mariaDBNode{p.primary, p.replica} {
		if n == nil {
			continue
		}
		if n.db != nil {
			n.db.Close()
		}
		if n.proc.Running() {
			_ = n.proc.Signal(syscall.SIGKILL)
			n.proc.Wait(10 * time.Second)
		}
	}
	// The old primary, dead since the failover, is no longer a node.
	os.RemoveAll(p.dir)
}

// switchProxy forwards TCP connections to an upstream that can be
// switched: the way production reaches a MariaDB that fails over
// (ProxySQL, MaxScale, a virtual IP). Switching cuts every connection it
// forwards, so that none goes on talking to the old upstream. Holding it
// stops what the upstream sends from reaching the clients (the
// replication link, held).
type switchProxy struct {
	ln   net.Listener
	gate sync.RWMutex // locked by hold; read-locked around each write to a client

	mu       sync.Mutex
	upstream string
	conns    map[net.Conn]struct{} // both ends of every forwarded connection
	closed   bool
	wg       sync.WaitGroup
}

func newSwitchProxy(upstream string) (*switchProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &switchProxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	return p, nil
}

func (p *switchProxy) addr() string { return p.ln.Addr().String() }

func (p *switchProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

// forward connects client c to the upstream and copies both ways until
// either side ends or the proxy cuts them. An upstream that refuses (the
// old primary, dead, before the switch) ends c at once, as a proxy
// without a server does.
func (p *switchProxy) forward(c net.Conn) {
	p.mu.Lock()
	up := p.upstream
	p.mu.Unlock()
	u, err := net.DialTimeout("tcp", up, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.closed || p.upstream != up {
		// Switched (or closed) while dialling: not a connection to keep.
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.conns[c], p.conns[u] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(u, c)
		done <- struct{}{}
	}()
	go func() {
		p.copyDown(c, u)
		done <- struct{}{}
	}()
	<-done
	c.Close()
	u.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

// copyDown copies what the upstream sends to the client, but not while
// the proxy is held.
func (p *switchProxy) copyDown(c, u net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := u.Read(buf)
		if n > 0 {
			p.gate.RLock()
			_, werr := c.Write(buf[:n])
			p.gate.RUnlock()
			if werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// hold stops forwarding what the upstreams send until release.
func (p *switchProxy) hold() { p.gate.Lock() }

func (p *switchProxy) release() { p.gate.Unlock() }

// switchTo makes upstream the target of new connections and cuts the
// ones forwarded so far; it returns how many it cut.
func (p *switchProxy) switchTo(upstream string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upstream = upstream
	for c := range p.conns {
		c.Close()
	}
	return len(p.conns) / 2
}

func (p *switchProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

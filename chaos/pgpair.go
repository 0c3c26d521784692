package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgPair is a PostgreSQL primary and its streaming replica of the run's
// own, from the server's binaries (Debian's /usr/lib/postgresql/N/bin),
// each a postmaster on a loopback port with its data directory in the
// pair's directory. The processes reach the pair with a multi-host URL
// and target_session_attrs=read-write: pgx tries the hosts in turn and
// takes the one that accepts writes, so that after the failover the
// processes' new connections find the promoted replica, as production's
// clients do without a proxy in front.
type pgPair struct {
	bin, dir string
	// sync: the replica is the primary's synchronous standby
	// (synchronous_commit=on, synchronous_standby_names naming it): a
	// COMMIT returns once the replica flushed it, so the failover loses
	// no acknowledged transaction. Without, the replica streams
	// asynchronously and the failover may lose the last ones.
	sync bool
	// cred runs the server's programs as the user postgres when the
	// harness runs as root (initdb refuses root); nil otherwise.
	cred *syscall.Credential
	// The servers by their roles at the start: after the failover the
	// replica is the primary, and the primary dead.
	primary, replica *pgNode
	failedOver       bool
	url              string       // adminURL
	log              func(string) // the servers' last log lines at close (Options.Log)
}

// pgNode is one server of the pair.
type pgNode struct {
	name, data, port string
}

func (n *pgNode) addr() string { return "127.0.0.1:" + n.port }

// replicaName is the replica's application_name, the name the primary's
// synchronous_standby_names and pg_stat_replication know it by.
const replicaName = "replica"

// startPGPair starts a PostgreSQL primary with a synchronous replica in
// dir, creates the database "test" on it, and returns once the replica
// streams as the synchronous standby.
func startPGPair(ctx context.Context, o Options, dir string) (dbPair, error) {
	return newPGPair(ctx, o, dir, true)
}

func newPGPair(ctx context.Context, o Options, dir string, sync bool) (_ *pgPair, err error) {
	bin, err := pgBinaries()
	if err != nil {
		return nil, err
	}
	p := &pgPair{bin: bin, dir: dir, sync: sync}
	if o.Log != nil {
		p.log = func(s string) { _, _ = o.Log.Write([]byte(s)) }
	}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	// Absolute: the postmasters' command lines name their data
	// directories so (postmasterPID).
	if p.dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	dir = p.dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		if err := p.runAsPostgres(dir); err != nil {
			return nil, err
		}
	}
	ports := make([]string, 0, 2)
	for len(ports) < 2 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		if !slices.Contains(ports, port) {
			ports = append(ports, port)
		}
	}
	p.primary = &pgNode{name: "primary", data: filepath.Join(dir, "primary"), port: ports[0]}
	p.replica = &pgNode{name: "replica", data: filepath.Join(dir, "replica"), port: ports[1]}

	if _, err := p.run(ctx, "initdb", "-D", p.primary.data, "-A", "trust", "-U", "postgres",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"); err != nil {
		return nil, err
	}
	// The settings both servers share go in postgresql.conf, which
	// pg_basebackup copies; each server's port comes after, in its
	// postgresql.auto.conf, which is read last. synchronous_standby_names
	// is set once the replica streams (ALTER SYSTEM, on the primary
	// alone): before, every commit (CREATE DATABASE test's too) would
	// wait for a standby that is not there yet, and the promoted replica
	// must not wait for a standby of its own, which it has not.
	// wal_retrieve_retry_interval is the replica's pause between attempts
	// to get WAL once the primary is gone: a promotion requested during
	// one waits for its end (5 s by default, seen to delay the
	// promotion so).
	conf := fmt.Sprintf(`
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
max_connections = 300
wal_level = replica
max_wal_senders = 10
max_replication_slots = 10
hot_standby = on
wal_retrieve_retry_interval = 200ms
fsync = on
synchronous_commit = on
`, dir)
	if err := pgAppendFile(filepath.Join(p.primary.data, "postgresql.conf"), conf); err != nil {
		return nil, err
	}
	if err := pgAppendFile(filepath.Join(p.primary.data, "postgresql.auto.conf"), "port = "+p.primary.port+"\n"); err != nil {
		return nil, err
	}
	if err := p.start(ctx, p.primary); err != nil {
		return nil, err
	}
	if err := p.exec(ctx, p.primary, "CREATE DATABASE test"); err != nil {
		return nil, err
	}

	// The replica: a base backup of the primary with the WAL streamed
	// alongside, a replication slot that keeps the WAL the replica has
	// not received, and -R's standby.signal and primary_conninfo, which
	// names the replica's application_name.
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%s user=postgres application_name=%s", p.primary.port, replicaName)
	if _, err := p.run(ctx, "pg_basebackup", "-D", p.replica.data, "-d", conninfo, "-R", "-X", "stream",
		"-C", "-S", replicaName, "--no-sync", "-c", "fast"); err != nil {
		return nil, err
	}
	if err := pgAppendFile(filepath.Join(p.replica.data, "postgresql.auto.conf"),
		fmt.Sprintf("port = %s\ncluster_name = '%s'\n", p.replica.port, replicaName)); err != nil {
		return nil, err
	}
	if err := p.start(ctx, p.replica); err != nil {
		return nil, err
	}
	if sync {
		if err := p.exec(ctx, p.primary, fmt.Sprintf("ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 (%s)'", replicaName)); err != nil {
			return nil, err
		}
		if err := p.exec(ctx, p.primary, "SELECT pg_reload_conf()"); err != nil {
			return nil, err
		}
	}
	if err := p.waitStreaming(ctx, time.Minute); err != nil {
		return nil, err
	}
	p.url = fmt.Sprintf("postgres://postgres@%s,%s/test?sslmode=disable&target_session_attrs=read-write",
		p.primary.addr(), p.replica.addr())
	return p, nil
}

// pgBinaries is the directory of the newest PostgreSQL server's
// programs Debian installed.
func pgBinaries() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	best, bestVersion := "", -1
	for _, d := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err == nil && v > bestVersion {
			if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
				best, bestVersion = d, v
			}
		}
	}
	if best == "" {
		return "", errors.New("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin (Debian: apt-get install postgresql)")
	}
	return best, nil
}

// runAsPostgres makes the pair's programs run as the user postgres, and
// gives it dir. The run's directory above (os.MkdirTemp's, mode 0700)
// is opened for it to pass through (search permission only); a
// directory further up that it cannot pass is an error.
func (p *pgPair) runAsPostgres(dir string) error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root, the PostgreSQL pair needs the user postgres: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if err := os.Chown(dir, int(uid), int(gid)); err != nil {
		return err
	}
	parent := filepath.Dir(dir)
	for d := parent; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if d != parent {
				return fmt.Errorf("the user postgres cannot reach %s: %s is mode %v", dir, d, fi.Mode().Perm())
			}
			if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
				return err
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// run runs one of the server's programs (as postgres, see cred) and
// returns its output, or an error with it.
func (p *pgPair) run(ctx context.Context, prog string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, prog), args...)
	cmd.Dir = p.dir
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", prog, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// start starts n's postmaster and waits until it accepts connections.
// pg_ctl logs the server's output to <data>.log, and leaves the
// postmaster in a session of its own: not the harness's child, it
// outlives a harness that dies without close.
func (p *pgPair) start(ctx context.Context, n *pgNode) error {
	if _, err := p.run(ctx, "pg_ctl", "-D", n.data, "-l", n.data+".log", "-w", "-t", "60", "start"); err != nil {
		return fmt.Errorf("start the %s: %w\n%s", n.name, err, pgLogTail(n.data+".log", 20))
	}
	return nil
}

// connect opens a connection to n's database postgres.
func (p *pgPair) connect(ctx context.Context, n *pgNode) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=5", n.addr()))
}

// exec runs one statement on n.
func (p *pgPair) exec(ctx context.Context, n *pgNode, stmt string) error {
	c, err := p.connect(ctx, n)
	if err != nil {
		return fmt.Errorf("the %s: %w", n.name, err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("the %s: %s: %w", n.name, stmt, err)
	}
	return nil
}

// replication is what the primary's pg_stat_replication says of the
// replica, with the primary's own position.
type replication struct {
	state, syncState string
	flushed          string // the primary's WAL flushed (pg_current_wal_flush_lsn)
	replicaFlushed   string // the WAL the replica reported flushed
	timeline         int64
}

// replicationState reads the replica's row of the primary's
// pg_stat_replication (state and sync_state empty when there is none).
func (p *pgPair) replicationState(ctx context.Context) (replication, error) {
	var r replication
	c, err := p.connect(ctx, p.primary)
	if err != nil {
		return r, fmt.Errorf("the primary: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = c.QueryRow(qctx, `SELECT coalesce(r.state, ''), coalesce(r.sync_state, ''), coalesce(r.flush_lsn::text, ''),
		pg_current_wal_flush_lsn()::text, `+currentTimeline+`
		FROM (SELECT 1) one LEFT JOIN pg_stat_replication r ON r.application_name = $1`, replicaName).
		Scan(&r.state, &r.syncState, &r.replicaFlushed, &r.flushed, &r.timeline)
	return r, err
}

// currentTimeline is the timeline a primary writes its WAL on: the first
// eight hex digits of the current WAL file's name. pg_control_checkpoint's
// timeline_id lags behind after a promotion until the checkpoint that
// the promotion requests, which is spread out (over half a minute, seen
// here).
const currentTimeline = `('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::bigint`

// wantState is the replica's state in pg_stat_replication the pair
// waits for and checks before the kill.
func (p *pgPair) wantState() string {
	if p.sync {
		return "sync"
	}
	return "async"
}

// waitStreaming waits until the primary's pg_stat_replication shows the
// replica streaming, as the synchronous standby if the pair is sync.
func (p *pgPair) waitStreaming(ctx context.Context, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	var last replication
	var lastErr error
	for {
		last, lastErr = p.replicationState(ctx)
		if lastErr == nil && last.state == "streaming" && last.syncState == p.wantState() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the replica did not stream as the %s standby within %s (pg_stat_replication: state %q, sync_state %q; %v)\n%s",
				p.wantState(), bound, last.state, last.syncState, lastErr, pgLogTail(p.replica.data+".log", 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (p *pgPair) adminURL() string { return p.url }

// failover kills the primary the way a machine dies: its postmaster and
// every process of the server at once, with SIGKILL, so that nothing of
// it writes, answers or holds its port afterwards; then promotes the
// replica, and returns once a client that connects as the processes do
// (adminURL) gets the promoted replica and may write.
func (p *pgPair) failover(ctx context.Context) (string, error) {
	if p.failedOver {
		return "", errors.New("the pair failed over already: no replica left")
	}
	// The replica's connection is opened before the kill: on a loaded
	// machine a new backend can take seconds to start, which would count
	// as the failover's time.
	rc, err := p.connect(ctx, p.replica)
	if err != nil {
		return "", fmt.Errorf("the replica: %w", err)
	}
	defer rc.Close(context.WithoutCancel(ctx))
	// Right before the kill, the replica must be the synchronous standby
	// (else the failover would prove nothing of synchronous replication).
	before, err := p.replicationState(ctx)
	if err != nil {
		return "", fmt.Errorf("before the kill: %w", err)
	}
	if before.state != "streaming" || before.syncState != p.wantState() {
		return "", fmt.Errorf("before the kill, the replica is not the %s standby: pg_stat_replication state %q, sync_state %q",
			p.wantState(), before.state, before.syncState)
	}
	checked := time.Now()
	pid, err := postmasterPID(p.primary.data)
	if err != nil {
		return "", err
	}
	gap := time.Since(checked)
	killedAt := time.Now()
	killed, err := pgKill(pid)
	if err != nil {
		return "", fmt.Errorf("kill the primary: %w", err)
	}
	if err := pgWaitRefused(ctx, p.primary.addr(), 10*time.Second); err != nil {
		return "", err
	}
	dead := time.Since(killedAt)

	// What the replica has of the primary's WAL, then the promotion:
	// pg_promote waits for it in steps of 100 ms (pg_ctl promote -w: of
	// a second).
	wal := "unknown"
	var received, replayed string
	var diff int64
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = rc.QueryRow(qctx, `SELECT pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text,
		pg_wal_lsn_diff(pg_last_wal_replay_lsn(), $1::pg_lsn)::bigint`, before.flushed).Scan(&received, &replayed, &diff)
	cancel()
	if err == nil {
		wal = fmt.Sprintf("received to %s, replayed to %s (%+d bytes from the primary's flush at the check)", received, replayed, diff)
	}
	promoted := false
	qctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	err = rc.QueryRow(qctx, "SELECT pg_promote(true, 60)").Scan(&promoted)
	cancel()
	if err != nil || !promoted {
		return "", fmt.Errorf("promote the replica (promoted: %v): %v\n%s", promoted, err, pgLogTail(p.replica.data+".log", 20))
	}
	promotedAfter := time.Since(killedAt)
	timeline, err := p.waitWritable(ctx, 30*time.Second)
	if err != nil {
		return "", err
	}
	if timeline <= before.timeline {
		return "", fmt.Errorf("the promoted replica writes on timeline %d, the old primary wrote on %d", timeline, before.timeline)
	}
	down := time.Since(killedAt)
	p.failedOver = true
	return fmt.Sprintf("primary :%s killed (SIGKILL: the postmaster %d and its %d processes), its port refusing connections %s after; "+
		"%s before the kill it was at WAL %s flushed, the replica (%s standby) at %s; the replica had %s; "+
		"promoted (:%s) %s after the kill; the processes' URL reaches it, writable, %s after, on timeline %d (the old primary's: %d)",
		p.primary.port, pid, len(killed), dead.Round(time.Millisecond), gap.Round(time.Microsecond), before.flushed, before.syncState,
		before.replicaFlushed, wal, p.replica.port, promotedAfter.Round(time.Millisecond), down.Round(time.Millisecond),
		timeline, before.timeline), nil
}

// waitWritable waits until a connection made with adminURL, the way the
// processes connect (the hosts in turn, the first that takes writes),
// reaches the replica and finds it out of recovery, and returns the
// timeline it writes on.
func (p *pgPair) waitWritable(ctx context.Context, bound time.Duration) (int64, error) {
	deadline := time.Now().Add(bound)
	var lastErr error
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := pgx.Connect(cctx, p.adminURL())
		if err != nil {
			lastErr = err
		} else {
			var recovering bool
			var port, timeline int64
			err = c.QueryRow(cctx, "SELECT pg_is_in_recovery(), inet_server_port(), "+
				"CASE WHEN pg_is_in_recovery() THEN 0 ELSE "+currentTimeline+" END").Scan(&recovering, &port, &timeline)
			c.Close(context.WithoutCancel(ctx))
			switch {
			case err != nil:
				lastErr = err
			case recovering:
				lastErr = errors.New("still in recovery")
			case strconv.FormatInt(port, 10) != p.replica.port:
				lastErr = fmt.Errorf("reached port %d, not the replica's (%s)", port, p.replica.port)
			default:
				cancel()
				return timeline, nil
			}
		}
		cancel()
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the promoted replica did not take writes within %s: %v\n%s", bound, lastErr,
				pgLogTail(p.replica.data+".log", 20))
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// postmasterPID returns the pid of the postmaster running on data: the
// first line of its postmaster.pid, if that process runs and is the
// postmaster of data (its command line says -D data). A killed server's
// postmaster.pid stays behind, and its pid may be another process's by
// now, the shared server's among them: neither pg_ctl stop nor a kill
// may reach that one.
func postmasterPID(data string) (int, error) {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("postmaster.pid of %s: %q", data, line)
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := strings.Split(string(cmdline), "\x00")
	if i := slices.Index(args, "-D"); i < 0 || i+1 >= len(args) || args[i+1] != data || !pgAlive(pid) {
		return 0, fmt.Errorf("the postmaster of %s (pid %d) does not run", data, pid)
	}
	return pid, nil
}

// pgKill kills the postmaster pid and its children with SIGKILL, and
// returns the children. PostgreSQL's child processes make themselves
// leaders of sessions of their own, so there is no process group to
// kill: the postmaster is stopped first (SIGSTOP), so that it forks no
// more, then its children are found and stopped (they run on for the
// moment that takes), then all are killed. A postmaster killed alone
// leaves its backends running, and answering their clients, until they
// notice; a backend killed alone makes the postmaster restart the
// server.
func pgKill(pid int) ([]int, error) {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("postmaster %d: %w", pid, err)
	}
	kids := pgChildren(pid)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGSTOP)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return nil, fmt.Errorf("postmaster %d: %w", pid, err)
	}
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	// Dead: gone, or a zombie that holds nothing (the postmaster's
	// parent, init or a subreaper, reaps it when it does).
	deadline := time.Now().Add(10 * time.Second)
	for _, q := range append([]int{pid}, kids...) {
		for pgAlive(q) {
			if time.Now().After(deadline) {
				return kids, fmt.Errorf("process %d of the killed server still runs after 10s", q)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return kids, nil
}

// pgChildren lists the processes whose parent is pid (from /proc).
func pgChildren(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range ents {
		q, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := pgProcStat(q); ppid == pid {
			kids = append(kids, q)
		}
	}
	return kids
}

// pgProcStat reads a process's parent and state from /proc/<pid>/stat
// (ppid 0, state 0 when it is gone).
func pgProcStat(pid int) (ppid int, state byte) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, 0
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0][0]
}

// pgAlive reports whether pid runs (neither gone nor a zombie).
func pgAlive(pid int) bool {
	_, state := pgProcStat(pid)
	return state != 0 && state != 'Z' && state != 'X'
}

// pgWaitRefused waits until addr refuses connections.
func pgWaitRefused(ctx context.Context, addr string, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		} else if errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the killed primary's port %s still does not refuse connections after %s (%v)", addr, bound, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// close stops both servers (immediate: nothing of them is wanted) and
// removes the pair's directory, after passing the servers' last log lines
// of their own to Options.Log.
func (p *pgPair) close() {
	for _, n := range []*pgNode{p.primary, p.replica} {
		if n == nil {
			continue
		}
		if pid, err := postmasterPID(n.data); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := p.run(ctx, "pg_ctl", "-D", n.data, "-m", "immediate", "-w", "-t", "20", "stop")
			cancel()
			if err != nil && pgAlive(pid) {
				_, _ = pgKill(pid)
			}
		}
		if p.log != nil {
			if tail := pgServerLines(n.data+".log", 30); tail != "" {
				p.log(fmt.Sprintf("postgres %s (:%s), the last lines of its log:\n%s\n", n.name, n.port, tail))
			}
		}
	}
	_ = os.RemoveAll(p.dir)
}

// pgAppendFile appends s to the file name.
func pgAppendFile(name, s string) error {
	f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pgLogTail returns the last n lines of the file name ("" when it cannot
// be read).
func pgLogTail(name string, n int) string {
	b, err := os.ReadFile(name)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// pgServerLines returns the last n lines of a server's log that the
// server wrote of itself (LOG, WARNING, FATAL, PANIC): the clients'
// errors, which the processes' own output shows, left out.
func pgServerLines(name string, n int) string {
	b, err := os.ReadFile(name)
	if err != nil {
		return ""
	}
	var keep []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		for _, level := range []string{" LOG: ", " WARNING: ", " FATAL: ", " PANIC: "} {
			if strings.Contains(l, level) {
				keep = append(keep, l)
				break
			}
		}
	}
	return strings.Join(keep[max(0, len(keep)-n):], "\n")
}

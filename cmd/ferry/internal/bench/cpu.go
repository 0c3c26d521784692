package bench

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
)

// clockTicks is the kernel's USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat; 100 on every Linux architecture Go runs on.
const clockTicks = 100

// CPU is the CPU time each party spent on one drain, in microseconds per
// event. A nil party was not measured: its server is not local, or it runs
// inside the bench's own process.
type CPU struct {
	DB     *float64 `json:"db_us_per_event,omitempty"`
	Broker *float64 `json:"broker_us_per_event,omitempty"`
	Relay  *float64 `json:"relay_us_per_event,omitempty"`
}

// meter reads the CPU time of the database and broker servers from /proc:
// every process with the server's command name, including the time of its
// children it has reaped (PostgreSQL's ended backends).
type meter struct {
	db, broker string // command names; "" when not measured
	// dbRoot, when set, measures the database as this process and its
	// descendants instead of by command name (see newTreeMeter).
	dbRoot string
}

// newMeter finds the processes listening on the database's and the
// broker's loopback ports. A server in the bench's own process, or one on
// another host, is not measured.
func newMeter(dbURL, brokerURL string) *meter {
	return &meter{db: localServer(dbURL), broker: localServer(brokerURL)}
}

// sample returns the CPU time so far of each database and broker server
// process, by pid.
func (m *meter) sample() (db, broker procCPU) {
	switch {
	case m.dbRoot != "":
		db = treeCPU(m.dbRoot)
	case m.db != "":
		db = commCPU(m.db)
	}
	if m.broker != "" {
		broker = commCPU(m.broker)
	}
	return db, broker
}

// procCPU is the CPU time of processes by pid.
type procCPU map[string]time.Duration

// since is the CPU time the processes of p used after before was taken:
// per process, never negative. A process that ended in between is left
// out (once its parent reaps it, the parent's children time counts it whole); one that
// started in between counts whole. Summing totals instead went negative
// when a PostgreSQL backend ended between the two samples.
func (p procCPU) since(before procCPU) time.Duration {
	var d time.Duration
	for pid, c := range p {
		d += max(c-before[pid], 0)
	}
	return d
}

// perEvent turns CPU time over n events into microseconds per event; nil
// when the party was not measured.
func perEvent(measured bool, d time.Duration, n int) *float64 {
	if !measured || n <= 0 {
		return nil
	}
	v := float64(d.Microseconds()) / float64(n)
	return &v
}

// selfCPU is the CPU time this process has used so far.
func selfCPU() time.Duration {
	c, _, ok := statCPU("self")
	if !ok {
		return 0
	}
	return c
}

// statCPU reads /proc/<pid>/stat: the command name, and utime + stime +
// cutime + cstime.
func statCPU(pid string) (time.Duration, string, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, "", false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return 0, "", false
	}
	comm := s[open+1 : end]
	f := strings.Fields(s[end+1:])
	if len(f) < 15 {
		return 0, "", false
	}
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, "", false
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, comm, true
}

// commCPU reads the CPU time of every process named comm.
func commCPU(comm string) procCPU {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := procCPU{}
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		if c, name, ok := statCPU(e.Name()); ok && name == comm {
			out[e.Name()] = c
		}
	}
	return out
}

// localServer returns the command name of the local process listening on
// rawURL's port, or "" when the host is not a loopback address, no such
// process is found, or it is this process.
func localServer(rawURL string) string {
	_, comm := localServerProc(rawURL)
	return comm
}

// localServerPID returns the pid of the local process listening on
// rawURL's port, as localServer finds it.
func localServerPID(rawURL string) string {
	pid, _ := localServerProc(rawURL)
	return pid
}

func localServerProc(rawURL string) (pid, comm string) {
	if cc, err := ferrykafka.ParseURL(rawURL); err == nil {
		rawURL = "kafka://" + cc.Seeds[0] // the first seed broker of a list
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return "", ""
	}
	host, port := u.Hostname(), u.Port()
	if host != "localhost" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return "", ""
		}
	}
	if port == "" {
		port = map[string]string{"mysql": "3306", "postgres": "5432", "postgresql": "5432", "amqp": "5672", "nats": "4222",
			"kafka": ferrykafka.DefaultPort}[u.Scheme]
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", ""
	}
	inodes := listening(p)
	if len(inodes) == 0 {
		return "", ""
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return "", ""
	}
	self := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		fds, err := os.ReadDir(filepath.Join("/proc", pid, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join("/proc", pid, "fd", fd.Name()))
			if err != nil || !inodes[link] {
				continue
			}
			if pid == self {
				return "", ""
			}
			_, comm, ok := statCPU(pid)
			if !ok {
				return "", ""
			}
			return pid, comm
		}
	}
	return "", ""
}

// listening returns the socket inodes ("socket:[123]") listening on TCP
// port.
func listening(port int) map[string]bool {
	out := map[string]bool{}
	want := fmt.Sprintf(":%04X", port)
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fl := strings.Fields(sc.Text())
			if len(fl) < 10 || fl[3] != "0A" || !strings.HasSuffix(fl[1], want) {
				continue
			}
			out["socket:["+fl[9]+"]"] = true
		}
		f.Close()
	}
	return out
}

// String formats the CPU split as "db 157 / broker 80 / relay 45", n/a
// for a party not measured.
func (c CPU) String() string {
	f := func(v *float64) string {
		if v == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.0f", *v)
	}
	return "db " + f(c.DB) + " / broker " + f(c.Broker) + " / relay " + f(c.Relay)
}

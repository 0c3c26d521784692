package ferryamqp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
)

var _ ferrybroker.DurabilityReader = (*Publisher)(nil)

// The fixes Durability proposes.
const (
	fixNameQueue  = "name the queue (--queue) so ferry can read its type"
	fixManagement = "give the management API (--management-url http://…:15672)"
	fixQuorum     = "declare the queue as a quorum queue (x-queue-type quorum, ferry relay --queue-type quorum --declare) on a cluster of 3 nodes"
	fixMirrored   = fixQuorum + "; mirroring a classic queue (a policy's ha-mode) is no fix: use a quorum queue"
)

// What RabbitMQ waits for before it confirms a persistent message, by
// queue type.
const (
	confirmQuorum  = "RabbitMQ confirms a persistent message once a majority of the members has written it to its log (fsynced)"
	confirmClassic = "RabbitMQ confirms a persistent message once it is on the node's disk (persisted, fsync batched)"
	// For a mirrored classic queue, once every mirror accepted it too.
	confirmMirrored = "RabbitMQ confirms a persistent message once it is on the leader's disk (persisted, fsync batched) and every mirror accepted it"
	confirmStream   = "RabbitMQ confirms a message once a majority of the members has written it (not fsynced: streams rely on replication)"
)

// Durability reads from RabbitMQ what its confirm of each queue of
// Config.Topology.Queues is worth, from the queue's type, members and
// flags as the management API (Config.ManagementURL) describes them in
// the publisher's virtual host (the broker URL's; for New, the
// connection's). A quorum queue or a stream of 3 members or more with a
// majority of them online is DurabilityReplicated. One of fewer members
// is DurabilitySingle, and so is one without a majority online: it
// confirms nothing until a majority is back, and what it confirmed is
// on fewer than a majority of reachable disks. A durable classic queue,
// mirrored or not, is DurabilitySingle (mirroring is deprecated and lost
// confirmed messages under partitions); a classic queue that is not
// durable, or is auto-delete or exclusive, is DurabilityVolatile. A
// queue the API does not know, every queue when ManagementURL is empty,
// and the exchange when no queue is named (no Topology.Queues) are
// DurabilityUnknown.
//
// It asks over HTTP, not over the publisher's connection, each request
// within ctx and Connection.DialTimeout. ManagementURL may list the APIs
// of several nodes of the cluster, comma-separated: each request goes to
// the first that answers, from the one that answered last (a node's API
// is down while the node is). It returns an error when the API cannot be
// asked (no API of the list reachable, or one refusing the credentials,
// answering an unexpected status or something other than JSON); the
// error never contains a password. The members online are the API's
// statistics, refreshed every few seconds (collect_statistics_interval,
// 5s by default): a node killed a moment ago may still count as online.
// A node cut off from the majority pauses under pause_minority, its API
// with it, so a cluster that lost its majority reads as an error.
func (p *Publisher) Durability(ctx context.Context) ([]ferrybroker.Durability, error) {
	var names []string
	seen := map[string]bool{}
	for _, q := range p.cfg.Topology.Queues {
		if !seen[q.Name] {
			seen[q.Name] = true
			names = append(names, q.Name)
		}
	}
	if len(names) == 0 {
		return []ferrybroker.Durability{{
			Destination: "exchange " + p.cfg.Exchange,
			Level:       ferrybroker.DurabilityUnknown,
			Settings:    "the queues bound to it are not named",
			Fix:         fixNameQueue,
		}}, nil
	}
	rows := make([]ferrybroker.Durability, 0, len(names))
	if p.cfg.ManagementURL == "" {
		for _, name := range names {
			rows = append(rows, ferrybroker.Durability{
				Destination: "queue " + name,
				Level:       ferrybroker.DurabilityUnknown,
				Settings:    "queue type not readable over AMQP 0-9-1",
				Fix:         fixManagement,
			})
		}
		return rows, nil
	}
	m, err := newManagements(p.cfg.ManagementURL, p.cfg.Connection)
	if err != nil {
		return nil, err
	}
	defer m.close()
	vhost := p.vhost
	if vhost == "" {
		vhost = "/"
	}
	for _, name := range names {
		q, found, err := m.queue(ctx, vhost, name)
		if err != nil {
			return nil, err
		}
		if !found {
			rows = append(rows, ferrybroker.Durability{
				Destination: "queue " + name,
				Level:       ferrybroker.DurabilityUnknown,
				Settings:    fmt.Sprintf("queue not found in virtual host %q by the management API", vhost),
				Fix:         "check that --management-url is the API of the broker the relay publishes to; " + fixQuorum,
			})
			continue
		}
		rows = append(rows, classifyQueue(name, q))
	}
	return rows, nil
}

// mgmtQueue is what Durability reads of GET /api/queues/{vhost}/{name}.
type mgmtQueue struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Durable    bool   `json:"durable"`
	AutoDelete bool   `json:"auto_delete"`
	Exclusive  bool   `json:"exclusive"`
	Node       string `json:"node"`
	// Members and Online: the nodes of a quorum queue's or a stream's
	// replicas, and those of them running.
	Members []string `json:"members"`
	Online  []string `json:"online"`
	// Policy and its definition: a classic queue is mirrored by a
	// policy with ha-mode, and its mirrors are SlaveNodes.
	Policy                    string         `json:"policy"`
	EffectivePolicyDefinition map[string]any `json:"effective_policy_definition"`
	SlaveNodes                []string       `json:"slave_nodes"`
}

// classifyQueue says what RabbitMQ's confirm of a message routed to the
// queue q describes is worth.
func classifyQueue(name string, q mgmtQueue) ferrybroker.Durability {
	d := ferrybroker.Durability{Destination: "queue " + name}
	switch q.Type {
	case "quorum":
		return replicas(d, "quorum queue", confirmQuorum, q)
	case "stream":
		return replicas(d, "stream", confirmStream, q)
	case "classic", "":
		// Before RabbitMQ 3.8 every queue was classic, and untyped.
	default:
		d.Level = ferrybroker.DurabilityUnknown
		d.Settings = fmt.Sprintf("queue type %q: ferry does not know what RabbitMQ's confirm of it is worth", q.Type)
		d.Fix = fixQuorum
		return d
	}
	var gone []string
	if !q.Durable {
		gone = append(gone, "not durable: RabbitMQ deletes it, with its messages, when it restarts")
	}
	if q.AutoDelete {
		gone = append(gone, "auto-delete: RabbitMQ deletes it, with its messages, when its last consumer goes")
	}
	if q.Exclusive {
		gone = append(gone, "exclusive: RabbitMQ deletes it, with its messages, when the connection that declared it closes")
	}
	if len(gone) > 0 {
		d.Level = ferrybroker.DurabilityVolatile
		d.Settings = "classic queue, " + strings.Join(gone, "; ")
		d.Fix = fixQuorum
		return d
	}
	d.Level = ferrybroker.DurabilitySingle
	d.Fix = fixMirrored
	node := ""
	if q.Node != "" {
		node = " (" + q.Node + ")"
	}
	mode, _ := q.EffectivePolicyDefinition["ha-mode"].(string)
	if mode == "" && len(q.SlaveNodes) == 0 {
		d.Settings = "classic queue: on one node" + node + "; " + confirmClassic
		return d
	}
	by := "mirrored"
	if q.Policy != "" {
		by = fmt.Sprintf("mirrored by policy %q", q.Policy)
	}
	if mode != "" {
		by += " (ha-mode " + mode + ")"
	}
	d.Settings = "classic queue " + by + ", counted as on one node" + node +
		": classic mirrored queues are deprecated and lost confirmed messages under network partitions in Jepsen's analysis; use a quorum queue; " +
		confirmMirrored
	return d
}

// replicas classifies a quorum queue or a stream by its members and how
// many of them are online.
func replicas(d ferrybroker.Durability, kind, confirm string, q mgmtQueue) ferrybroker.Durability {
	n := len(q.Members)
	if n == 0 {
		// The management API adds a stream's members with its first
		// statistics, a few seconds after the declare.
		d.Level = ferrybroker.DurabilityUnknown
		d.Settings = kind + ": the management API does not list its members yet (its statistics follow a declare by a few seconds)"
		d.Fix = "ask again in a few seconds"
		return d
	}
	members := map[string]bool{}
	for _, m := range q.Members {
		members[m] = true
	}
	online := 0
	onlineSet := map[string]bool{}
	for _, m := range q.Online {
		if members[m] && !onlineSet[m] {
			onlineSet[m] = true
			online++
		}
	}
	d.Settings = fmt.Sprintf("%s, %d %s, %d online", kind, n, plural(n, "member", "members"), online)
	switch {
	case online <= n/2:
		// No leader: nothing is confirmed until a majority is back, and
		// what was confirmed is on fewer than a majority of reachable
		// disks: at most one node's, for 1 of 3 online.
		var off []string
		for _, m := range q.Members {
			if !onlineSet[m] {
				off = append(off, m)
			}
		}
		d.Level = ferrybroker.DurabilitySingle
		d.Settings += fmt.Sprintf(": no majority online, so it has no leader and confirms nothing until %d of its members run, "+
			"and what it confirmed before is on fewer than %d reachable disks; %s", n/2+1, n/2+1, confirm)
		d.Fix = "bring its offline members back (" + strings.Join(off, ", ") + ")"
		if n < 3 {
			d.Fix += "; " + growFix(kind)
		}
	case n < 3:
		d.Level = ferrybroker.DurabilitySingle
		d.Settings += "; " + confirm
		switch {
		case n == 2:
			d.Settings += ", and with 2 members losing either stops it"
		case kind == "stream":
			d.Settings += ", and its one member is one node, where a crash of the machine can lose what its page cache held"
		default:
			d.Settings += ", and its one member is one node"
		}
		d.Fix = growFix(kind)
	default:
		d.Level = ferrybroker.DurabilityReplicated
		d.Settings += "; " + confirm
	}
	return d
}

func growFix(kind string) string {
	if kind == "stream" {
		return "give the stream 3 members on a cluster of 3 nodes (x-initial-cluster-size 3 at declare, or rabbitmq-streams add_replica)"
	}
	return "give the queue 3 members (rabbitmq-queues add_member, or grow) on a cluster of 3 nodes, or " + fixQuorum
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// management asks RabbitMQ's management API over HTTP.
type management struct {
	raw      string // Config.ManagementURL
	base     string // scheme://host:port/prefix, without credentials or trailing /
	redacted string // base as errors show it, with the user and without the password
	user     *url.Userinfo
	client   *http.Client
	tr       *http.Transport
}

// managements is the management APIs of Config.ManagementURL, one or a
// comma-separated list of them, asked in turn.
type managements struct {
	apis []*management
	cur  int // the API that answered last
}

// parseManagementURLs checks Config.ManagementURL: one URL, or a list of
// them (splitURLs), none empty.
func parseManagementURLs(raw string) ([]string, error) {
	elems := splitURLs(raw)
	for i, e := range elems {
		if e == "" {
			return nil, fmt.Errorf("%w: Config.ManagementURL %s: URL %d of the %d comma-separated URLs is empty (a stray comma?)",
				ferrytype.ErrInvalidConfig, ferrytype.RedactURL(raw), i+1, len(elems))
		}
		if _, err := parseManagementURL(e); err != nil {
			return nil, ferrytype.RedactError(err, raw)
		}
	}
	return elems, nil
}

func newManagements(raw string, c ConnectionConfig) (*managements, error) {
	elems, err := parseManagementURLs(raw)
	if err != nil {
		return nil, err
	}
	ms := &managements{}
	for _, e := range elems {
		m, err := newManagement(e, c)
		if err != nil {
			return nil, err
		}
		ms.apis = append(ms.apis, m)
	}
	return ms, nil
}

func (ms *managements) close() {
	for _, m := range ms.apis {
		m.close()
	}
}

// queue asks the APIs in turn, from the one that answered last, for the
// queue, until one answers (with any status); an API that cannot be
// reached is passed over. Without an answer the error says why each API
// gave none; it ends at once when ctx does.
func (ms *managements) queue(ctx context.Context, vhost, name string) (mgmtQueue, bool, error) {
	var errs []string
	var last error
	for k := range ms.apis {
		i := (ms.cur + k) % len(ms.apis)
		q, found, answered, err := ms.apis[i].queue(ctx, vhost, name)
		if answered || ctx.Err() != nil {
			ms.cur = i
			return q, found, err
		}
		last = err
		errs = append(errs, err.Error())
	}
	if len(ms.apis) == 1 {
		return mgmtQueue{}, false, last
	}
	return mgmtQueue{}, false, fmt.Errorf("ferryamqp: none of the %d RabbitMQ management APIs answered: %s",
		len(ms.apis), strings.Join(errs, "; "))
}

// parseManagementURL checks one URL of Config.ManagementURL.
func parseManagementURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: Config.ManagementURL %s: %s", ferrytype.ErrInvalidConfig,
			ferrytype.RedactURL(raw), ferrytype.RedactSecrets(err.Error(), raw))
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%w: Config.ManagementURL %s: want http:// or https://", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(raw))
	case u.Host == "":
		return nil, fmt.Errorf("%w: Config.ManagementURL %s: no host", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(raw))
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("%w: Config.ManagementURL %s: want no query or fragment", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(raw))
	}
	return u, nil
}

func newManagement(raw string, c ConnectionConfig) (*management, error) {
	u, err := parseManagementURL(raw)
	if err != nil {
		return nil, err
	}
	m := &management{raw: raw, redacted: strings.TrimRight(ferrytype.RedactURL(raw), "/"), user: u.User}
	m.base = u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/")
	if dt, ok := http.DefaultTransport.(*http.Transport); ok {
		m.tr = dt.Clone()
	} else {
		m.tr = &http.Transport{Proxy: http.ProxyFromEnvironment}
	}
	if u.Scheme == "https" && c.TLS != nil {
		m.tr.TLSClientConfig = c.TLS.Clone()
	}
	timeout := c.DialTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	m.client = &http.Client{Transport: m.tr, Timeout: timeout}
	return m, nil
}

func (m *management) close() { m.tr.CloseIdleConnections() }

// queue reads GET /api/queues/{vhost}/{name}; found is false on a 404.
// answered is false when no answer came (the API unreachable, the
// request failed), true when the API answered, whatever it said.
func (m *management) queue(ctx context.Context, vhost, name string) (q mgmtQueue, found, answered bool, err error) {
	path := "/api/queues/" + url.PathEscape(vhost) + "/" + url.PathEscape(name)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.base+path, nil)
	if err != nil {
		return q, false, false, m.fail(path, err)
	}
	req.Header.Set("Accept", "application/json")
	if m.user != nil {
		pass, _ := m.user.Password()
		req.SetBasicAuth(m.user.Username(), pass)
	}
	resp, err := m.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL
		}
		return q, false, false, m.fail(path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return q, false, false, m.fail(path, fmt.Errorf("read the answer: %w", err))
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return q, false, true, nil
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return q, false, true, m.fail(path, fmt.Errorf("the management API refused the credentials (%s%s): "+
			"check the user and password of --management-url, and that the user has the management or monitoring tag "+
			"and access to virtual host %q", resp.Status, reason(body), vhost))
	case resp.StatusCode != http.StatusOK:
		return q, false, true, m.fail(path, fmt.Errorf("answered %s%s", resp.Status, reason(body)))
	}
	if err := json.Unmarshal(body, &q); err != nil {
		return q, false, true, m.fail(path, fmt.Errorf("the answer is not the management API's JSON (is the URL the management API's?): %w", err))
	}
	return q, true, true, nil
}

// fail describes an error of the request to path, without the password.
func (m *management) fail(path string, err error) error {
	return ferrytype.RedactError(fmt.Errorf("ferryamqp: RabbitMQ management API: GET %s%s: %w", m.redacted, path, err), m.raw)
}

// reason returns the "reason" of the management API's error JSON, as
// ": reason", or "".
func reason(body []byte) string {
	var e struct {
		Error  string `json:"error"`
		Reason string `json:"reason"`
	}
	if json.Unmarshal(body, &e) != nil || e.Reason == "" && e.Error == "" {
		return ""
	}
	r := e.Reason
	if r == "" {
		r = e.Error
	}
	if len(r) > 200 {
		r = r[:200] + "…"
	}
	return ": " + r
}

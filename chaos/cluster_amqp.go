package chaos

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ferrydev/ferry/examples/shop"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp/ferryamqptest"
)

// amqpCluster is the amqpBroker's cluster (Options.AMQPCluster): the
// run's virtual host on the tests' own three-node RabbitMQ cluster, the
// shop's queues quorum queues on the three (ferryamqp's default type),
// the processes given every node's URL.
type amqpCluster struct {
	c     *ferryamqptest.Cluster
	vhost string
}

// newAMQPClusterBroker is newAMQPBroker on o.AMQPCluster: the virtual
// host is made through the first node's management API, the processes
// connect through a list of the three nodes (each through a proxy of its
// own when the run proxies the network), and the harness's own reads go
// to the first node, which node-kill starts again before they come.
func newAMQPClusterBroker(ctx context.Context, o Options, px *proxies, suffix string) (*amqpBroker, error) {
	c := o.AMQPCluster
	first, err := url.Parse(c.Nodes[0].URL)
	if err != nil {
		return nil, err
	}
	api, err := url.Parse(c.Nodes[0].ManagementURL)
	if err != nil {
		return nil, err
	}
	b := &amqpBroker{vhost: "chaos_" + suffix, host: first.Host, node: c.Nodes[0].Name,
		admin: vhostAdmin{api: api, user: first.User.Username()}}
	b.cluster = &amqpCluster{c: c, vhost: b.vhost}
	if err := b.admin.add(ctx, b.vhost); err != nil {
		return nil, err
	}
	with := func(u *url.URL, host string) string {
		v := *u
		v.Host, v.Path, v.RawPath = host, "/"+b.vhost, ""
		return v.String()
	}
	var proxied []string
	for _, n := range c.Nodes {
		u, err := url.Parse(n.URL)
		if err != nil {
			b.close()
			return nil, err
		}
		addr, err := px.add("broker", u.Host)
		if err != nil {
			b.close()
			return nil, err
		}
		proxied = append(proxied, with(u, addr))
	}
	b.direct, b.proxied = with(first, first.Host), strings.Join(proxied, ",")
	if err := shop.SetupAMQP(ctx, b.proxied); err != nil {
		b.close()
		return nil, fmt.Errorf("declare the shop's topology: %w", err)
	}
	return b, nil
}

// faultLeader is nodeKiller's, for the RabbitMQ cluster: the node that
// leads the points queue (the queue every order's events reach) is
// faulted.
func (b *amqpBroker) faultLeader(ctx context.Context, pause bool, down time.Duration, say func(string, ...any)) (faulted, moved bool, err error) {
	if b.cluster == nil {
		return false, false, fmt.Errorf("not a cluster (Options.AMQPCluster)")
	}
	c := b.cluster.c
	leader, _, _, err := c.QueueMembers(b.vhost, "points")
	if err != nil {
		return false, false, fmt.Errorf("read the points queue's leader: %w", err)
	}
	i := slices.IndexFunc(c.Nodes, func(n ferryamqptest.ClusterNode) bool { return n.Name == leader })
	if i < 0 {
		return false, false, fmt.Errorf("the points queue's leader %q is none of the cluster's nodes", leader)
	}
	victim := c.Nodes[i]
	// From here on the fault runs to its end, the load's end
	// notwithstanding: the settle needs the three nodes back.
	ctx = context.WithoutCancel(ctx)
	if pause {
		if err := c.PauseNode(victim.N); err != nil {
			return false, false, err
		}
		say("broker: SIGSTOP %s, the points queue's leader", victim.Name)
	} else {
		if err := c.KillNode(victim.N); err != nil {
			return false, false, err
		}
		say("broker: SIGKILL %s, the points queue's leader", victim.Name)
	}
	var now string
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if now, _, _, err = c.QueueMembers(b.vhost, "points"); err == nil && now != "" && now != victim.Name {
			moved = true
			break
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	if moved {
		say("broker: %s leads the points queue", now)
	} else {
		say("broker: no other node took the points queue's lead from %s within 60 s (last: %q, %v)", victim.Name, now, err)
	}
	sleepCtx(ctx, down)
	if pause {
		if err := c.ResumeNode(victim.N); err != nil {
			return true, moved, err
		}
	} else if err := c.StartNode(victim.N, 3*time.Minute); err != nil {
		return true, moved, err
	}
	// The next kill waits until the node started again is a member
	// online of both queues again: killing a second member before then
	// would take their quorum.
	deadline = time.Now().Add(60 * time.Second)
	for {
		all := true
		for _, q := range []string{"points", "sms"} {
			_, members, online, err := c.QueueMembers(b.vhost, q)
			if err != nil || len(members) == 0 || len(online) != len(members) {
				all = false
			}
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			return true, moved, fmt.Errorf("%s: started again, not online in both queues within 60 s", victim.Name)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	say("broker: %s back and online in both queues", victim.Name)
	return true, moved, nil
}

var _ nodeKiller = (*amqpBroker)(nil)

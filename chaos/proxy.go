package chaos

import (
	"context"
	"fmt"
	"strings"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// proxies runs toxiproxy inside the harness for a scenario that puts
// toxics on the network (Scenario.Network): every connection of the
// system's processes to a database or the broker goes through a proxy,
// where the scenario adds them. A name may stand for several proxies (one
// per Kafka broker): a toxic on the name hits them all.
//
// The other scenarios' processes connect directly: their faults are not
// the network's, and the proxies, which copy every byte through a chain of
// goroutines, cost the harness a core-second every few seconds of a run.
// A nil *proxies is that: add returns the upstream itself.
type proxies struct {
	server *toxiproxy.ApiServer
	byName map[string][]*toxiproxy.Proxy
}

func newProxies(network bool) *proxies {
	if !network {
		return nil
	}
	return &proxies{
		server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
		byName: map[string][]*toxiproxy.Proxy{},
	}
}

// add proxies upstream (host:port) on a free loopback port and returns the
// proxy's address (without proxies, upstream). Adding a name again adds a proxy to the name.
func (p *proxies) add(name, upstream string) (string, error) {
	if p == nil {
		return upstream, nil
	}
	unique := fmt.Sprintf("%s-%d", name, len(p.byName[name]))
	px := toxiproxy.NewProxy(p.server, unique, "127.0.0.1:0", upstream)
	if err := p.server.Collection.Add(px, true); err != nil {
		return "", fmt.Errorf("proxy %s: %w", unique, err)
	}
	p.byName[name] = append(p.byName[name], px)
	return px.Listen, nil
}

// toxic adds a toxic to the named proxy, on both directions for
// reset_peer and timeout, downstream for latency.
func (p *proxies) toxic(name, kind string, attrs string) error {
	if p == nil {
		return fmt.Errorf("no proxy %s: the scenario does not proxy the network (Scenario.Network)", name)
	}
	pxs := p.byName[name]
	if len(pxs) == 0 {
		return fmt.Errorf("no proxy %s", name)
	}
	streams := []string{"downstream"}
	if kind != "latency" {
		streams = append(streams, "upstream")
	}
	for _, px := range pxs {
		for _, s := range streams {
			js := fmt.Sprintf(`{"name":"%s_%s","type":"%s","stream":"%s","toxicity":1,"attributes":%s}`, kind, s, kind, s, attrs)
			if _, err := px.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
				return fmt.Errorf("toxic %s on %s: %w", kind, px.Name, err)
			}
		}
	}
	return nil
}

// heal removes every toxic of every proxy.
func (p *proxies) heal() {
	if p == nil {
		return
	}
	for _, pxs := range p.byName {
		for _, px := range pxs {
			px.Toxics.ResetToxics(context.Background())
		}
	}
}

func (p *proxies) close() {
	if p == nil {
		return
	}
	for _, pxs := range p.byName {
		for _, px := range pxs {
			px.Stop()
		}
	}
}

package chaos

import (
	"context"
	"fmt"
	"strings"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// proxies runs toxiproxy inside the harness: every connection of the
// system's processes to a database or the broker goes through a proxy,
// where the network scenarios add toxics. A name may stand for several
// proxies (one per Kafka broker): a toxic on the name hits them all.
type proxies struct {
	server *toxiproxy.ApiServer
	byName map[string][]*toxiproxy.Proxy
}

func newProxies() *proxies {
	return &proxies{
		server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
		byName: map[string][]*toxiproxy.Proxy{},
	}
}

// add proxies upstream (host:port) on a free loopback port and returns the
// proxy's address. Adding a name again adds a proxy to the name.
func (p *proxies) add(name, upstream string) (string, error) {
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
	for _, pxs := range p.byName {
		for _, px := range pxs {
			px.Toxics.ResetToxics(context.Background())
		}
	}
}

func (p *proxies) close() {
	for _, pxs := range p.byName {
		for _, px := range pxs {
			px.Stop()
		}
	}
}

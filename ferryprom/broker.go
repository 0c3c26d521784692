package ferryprom

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
)

// RegisterBrokerConnected registers with reg the gauge
// ferry_broker_connected{broker}: 1 while connected reports the relay's
// broker connection up, 0 otherwise. connected is called at each scrape,
// so it must not wait on the network: a publisher's Connected method, or
// "opened and not known to be down". broker names the broker system
// ("nats", "rabbitmq").
func RegisterBrokerConnected(reg prometheus.Registerer, broker string, connected func() bool, constLabels prometheus.Labels) error {
	if nilness.Nil(reg) || connected == nil {
		return fmt.Errorf("%w: ferryprom.RegisterBrokerConnected: Registerer and connected must not be nil", ferrytype.ErrInvalidConfig)
	}
	labels := prometheus.Labels{"broker": broker}
	for k, v := range constLabels {
		labels[k] = v
	}
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "ferry_broker_connected",
		Help:        "1 while the relay's broker connection is up, 0 while it is down, blocked or not opened yet.",
		ConstLabels: labels,
	}, func() float64 {
		if connected() {
			return 1
		}
		return 0
	}))
}

package ferryprom

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/buildinfo"
	"github.com/ferrydev/ferry/internal/nilness"
)

// BuildInfo holds the labels of ferry_build_info. An empty field is read
// from the running binary's build information (runtime/debug.ReadBuildInfo):
// ferry's module version, the VCS revision when ferry is the binary's main
// module (a program that imports ferry has a revision of its own, not
// ferry's: empty then), and the Go version.
type BuildInfo struct {
	Version   string
	Revision  string
	GoVersion string
}

// NewBuildInfo returns the gauge ferry_build_info{version, revision,
// goversion}, always 1: join it on its labels to see which ferry runs where
// (count by (version) (ferry_build_info)). info's empty fields are read from
// the binary (see BuildInfo). Register it with the registry that serves
// the relay's /metrics, or use RegisterBuildInfo.
func NewBuildInfo(info BuildInfo, constLabels prometheus.Labels) prometheus.Collector {
	bi := buildinfo.Read(info.Version)
	if info.Revision == "" {
		info.Revision = bi.Revision
	}
	if info.GoVersion == "" {
		info.GoVersion = bi.GoVersion
	}
	labels := prometheus.Labels{"version": bi.Version, "revision": info.Revision, "goversion": info.GoVersion}
	for k, v := range constLabels {
		labels[k] = v
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "ferry_build_info",
		Help:        "Always 1: the ferry version, VCS revision and Go version of the running process, as labels.",
		ConstLabels: labels,
	})
	g.Set(1)
	return g
}

// RegisterBuildInfo registers NewBuildInfo(info, nil) with reg, which must
// not be nil: ferryprom never uses the global registry.
func RegisterBuildInfo(reg prometheus.Registerer, info BuildInfo) error {
	if nilness.Nil(reg) {
		return fmt.Errorf("%w: ferryprom.RegisterBuildInfo: Registerer is nil", ferrytype.ErrInvalidConfig)
	}
	if err := reg.Register(NewBuildInfo(info, nil)); err != nil {
		return fmt.Errorf("ferryprom: %w", err)
	}
	return nil
}

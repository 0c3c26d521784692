package deploy

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// manifest is what the checks read of a Kubernetes object.
type manifest struct {
	Kind     string
	Metadata struct {
		Name   string
		Labels map[string]string
	}
	Data map[string]string
	Spec struct {
		Replicas     int
		MinAvailable int `yaml:"minAvailable"`
		Selector     struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		}
		Template struct {
			Metadata struct {
				Labels      map[string]string
				Annotations map[string]string
			}
			Spec struct {
				TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
				SecurityContext               struct {
					RunAsNonRoot bool `yaml:"runAsNonRoot"`
				} `yaml:"securityContext"`
				Containers []struct {
					Args          []string
					LivenessProbe *struct {
						HTTPGet *struct{ Path string } `yaml:"httpGet"`
					} `yaml:"livenessProbe"`
					ReadinessProbe *struct {
						HTTPGet *struct{ Path string } `yaml:"httpGet"`
					} `yaml:"readinessProbe"`
					Resources struct {
						Requests map[string]string
						Limits   map[string]string
					}
					SecurityContext struct {
						AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
						ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
					} `yaml:"securityContext"`
				}
			}
		}
	}
}

func loadManifests(t *testing.T, path string) map[string]manifest {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]manifest{}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	for {
		var m manifest
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, path)
		out[m.Kind] = m
	}
	return out
}

// The relay's manifests are what the issue of running it demands: probes
// on /healthz and /readyz, resources, a non-root read-only container, a
// disruption budget over the same pods, scrape annotations, and a grace
// period longer than the relay's shutdown timeout.
func TestRelayManifests(t *testing.T) {
	t.Parallel()
	m := loadManifests(t, "kubernetes/relay.yaml")
	dep, pdb, cm := m["Deployment"], m["PodDisruptionBudget"], m["ConfigMap"]
	require.GreaterOrEqual(t, dep.Spec.Replicas, 2, "relays share a table: two survive a node")
	pod := dep.Spec.Template
	require.Equal(t, dep.Spec.Selector.MatchLabels, pdb.Spec.Selector.MatchLabels, "the budget covers the relays")
	for k, v := range dep.Spec.Selector.MatchLabels {
		require.Equal(t, v, pod.Metadata.Labels[k])
	}
	require.Equal(t, 1, pdb.Spec.MinAvailable)
	require.Equal(t, "true", pod.Metadata.Annotations["prometheus.io/scrape"])
	require.True(t, pod.Spec.SecurityContext.RunAsNonRoot)
	require.Len(t, pod.Spec.Containers, 1)
	c := pod.Spec.Containers[0]
	require.Equal(t, "relay", c.Args[0])
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.NotEmpty(t, c.Resources.Requests["cpu"])
	require.NotEmpty(t, c.Resources.Limits["memory"])
	require.True(t, c.SecurityContext.ReadOnlyRootFilesystem)
	require.NotNil(t, c.SecurityContext.AllowPrivilegeEscalation)
	require.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
	shutdown, err := time.ParseDuration(cm.Data["FERRY_SHUTDOWN_TIMEOUT"])
	require.NoError(t, err)
	require.Greater(t, time.Duration(pod.Spec.TerminationGracePeriodSeconds)*time.Second, shutdown,
		"the kill comes after the relay finished its batches")
}

// The console runs as one non-root, read-only container with resources,
// probed on its unauthenticated /healthz.
func TestConsoleManifests(t *testing.T) {
	t.Parallel()
	dep := loadManifests(t, "kubernetes/console.yaml")["Deployment"]
	pod := dep.Spec.Template
	require.True(t, pod.Spec.SecurityContext.RunAsNonRoot)
	c := pod.Spec.Containers[0]
	require.Equal(t, "console", c.Args[0])
	require.NotNil(t, c.LivenessProbe.HTTPGet)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.NotNil(t, c.ReadinessProbe.HTTPGet)
	require.Equal(t, "/healthz", c.ReadinessProbe.HTTPGet.Path)
	require.NotEmpty(t, c.Resources.Limits["memory"])
	require.True(t, c.SecurityContext.ReadOnlyRootFilesystem)
}

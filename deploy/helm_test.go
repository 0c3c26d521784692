package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

const (
	chartDir        = "helm/ferry"
	chartValues     = chartDir + "/values.yaml"
	chartReadme     = chartDir + "/README.md"
	chartAlerts     = chartDir + "/files/ferry-alerts.yml"
	allOnValues     = chartDir + "/ci/all-on-values.yaml"
	manifestsValues = chartDir + "/ci/manifests-values.yaml"
	deployDoc       = "../docs/deploy.md"
)

// valueSets are the values files the chart is rendered with: the
// defaults, every optional object on, and the plain manifests' twin.
var valueSets = map[string]string{"defaults": "", "all-on": allOnValues, "manifests": manifestsValues}

// helmBinary returns the helm that scripts/helm.sh installs in .bin/, or
// one on the PATH. Without either the test is skipped, or fails with
// FERRY_REQUIRE_SERVICES=1 (CI, whose .ci/run installs it first).
func helmBinary(t *testing.T) string {
	t.Helper()
	if p, err := filepath.Abs("../.bin/helm"); err == nil {
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	if os.Getenv("FERRY_REQUIRE_SERVICES") == "1" {
		t.Fatal("helm is missing: scripts/helm.sh installs it into .bin/ (.ci/run runs it before the tests)")
	}
	t.Skip("helm is not installed: scripts/helm.sh installs it into .bin/ (CI requires it)")
	return ""
}

// helm runs the helm binary with args in this directory, its own
// directories in a temporary one and no cluster, and returns its output.
func helm(t *testing.T, bin string, args ...string) ([]byte, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config",
		"HELM_DATA_HOME="+home+"/data", "KUBECONFIG="+home+"/no-kubeconfig")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// k8sObject is what the checks read of a rendered object; raw holds all
// of it.
type k8sObject struct {
	Kind     string
	Metadata struct {
		Name        string
		Labels      map[string]string
		Annotations map[string]string
	}
	Data map[string]string
	Spec struct {
		Replicas     *int
		MinAvailable any `yaml:"minAvailable"`
		Template     struct {
			Metadata struct {
				Labels      map[string]string
				Annotations map[string]string
			}
			Spec podSpec
		}
		Ports []struct {
			Name       string
			Port       int
			TargetPort any `yaml:"targetPort"`
		}
		Endpoints []struct{ Port, Path string }
		TLS       []struct {
			Hosts      []string
			SecretName string `yaml:"secretName"`
		} `yaml:"tls"`
		Rules []struct{ Host string }
	}
	raw map[string]any
}

type podSpec struct {
	AutomountServiceAccountToken  *bool          `yaml:"automountServiceAccountToken"`
	EnableServiceLinks            *bool          `yaml:"enableServiceLinks"`
	TerminationGracePeriodSeconds int            `yaml:"terminationGracePeriodSeconds"`
	RestartPolicy                 string         `yaml:"restartPolicy"`
	SecurityContext               map[string]any `yaml:"securityContext"`
	Containers                    []container
	Volumes                       []struct {
		Name      string
		ConfigMap *struct{ Name string } `yaml:"configMap"`
		Secret    *struct {
			SecretName string `yaml:"secretName"`
		}
	}
}

type container struct {
	Name  string
	Args  []string
	Env   []envVar
	Ports []struct {
		Name          string
		ContainerPort int `yaml:"containerPort"`
	}
	LivenessProbe   map[string]any `yaml:"livenessProbe"`
	ReadinessProbe  map[string]any `yaml:"readinessProbe"`
	Resources       map[string]any
	SecurityContext map[string]any `yaml:"securityContext"`
	EnvFrom         []struct {
		ConfigMapRef *struct{ Name string } `yaml:"configMapRef"`
		SecretRef    *struct{ Name string } `yaml:"secretRef"`
	} `yaml:"envFrom"`
	VolumeMounts []struct {
		Name      string
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type envVar struct {
	Name      string
	Value     string
	ValueFrom *struct {
		SecretKeyRef *struct{ Name, Key string } `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

// decodeObjects parses a stream of YAML documents, skipping empty ones.
func decodeObjects(t *testing.T, what string, b []byte) []k8sObject {
	t.Helper()
	var out []k8sObject
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, what)
		var o k8sObject
		require.NoError(t, n.Decode(&o), what)
		if o.Kind == "" {
			continue
		}
		require.NoError(t, n.Decode(&o.raw), what)
		out = append(out, o)
	}
	return out
}

// render runs helm template on the chart with the values files given and
// returns the objects it renders.
func render(t *testing.T, bin string, valuesFiles ...string) []k8sObject {
	t.Helper()
	args := []string{"template", "ferry", chartDir}
	for _, f := range valuesFiles {
		if f != "" {
			args = append(args, "-f", f)
		}
	}
	out, err := helm(t, bin, args...)
	require.NoError(t, err)
	objs := decodeObjects(t, "helm "+strings.Join(args, " "), out)
	require.NotEmpty(t, objs)
	return objs
}

// byKind returns the objects of kind, by name.
func byKind(objs []k8sObject, kind string) map[string]k8sObject {
	out := map[string]k8sObject{}
	for _, o := range objs {
		if o.Kind == kind {
			out[o.Metadata.Name] = o
		}
	}
	return out
}

// one returns the only object of kind whose name ends in suffix.
func one(t *testing.T, objs []k8sObject, kind, suffix string) k8sObject {
	t.Helper()
	var found []k8sObject
	for _, o := range byKind(objs, kind) {
		if strings.HasSuffix(o.Metadata.Name, suffix) {
			found = append(found, o)
		}
	}
	require.Len(t, found, 1, "one %s named *%s", kind, suffix)
	return found[0]
}

// dig returns the value at path in m (maps only), nil when absent.
func dig(m any, path ...string) any {
	for _, p := range path {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil
		}
		m = mm[p]
	}
	return m
}

// httpAddrPort returns the port of a container's --http-addr :PORT.
func httpAddrPort(t *testing.T, c container) int {
	t.Helper()
	i := slices.Index(c.Args, "--http-addr")
	require.GreaterOrEqual(t, i, 0, "container %s: --http-addr in %v", c.Name, c.Args)
	require.Less(t, i+1, len(c.Args))
	_, port, ok := strings.Cut(c.Args[i+1], ":")
	require.True(t, ok, "--http-addr %s", c.Args[i+1])
	n, err := strconv.Atoi(port)
	require.NoError(t, err)
	return n
}

// checkProbe checks that probe asks GET path on the port the container
// serves with --http-addr.
func checkProbe(t *testing.T, c container, probe map[string]any, which, path string) {
	t.Helper()
	require.NotNil(t, probe, "container %s: %s", c.Name, which)
	require.Equal(t, path, dig(probe, "httpGet", "path"), "container %s: %s path", c.Name, which)
	port := dig(probe, "httpGet", "port")
	want := httpAddrPort(t, c)
	for _, p := range c.Ports {
		if p.Name == port || p.ContainerPort == port {
			require.Equal(t, want, p.ContainerPort, "container %s: %s probes the port of --http-addr", c.Name, which)
			return
		}
	}
	t.Fatalf("container %s: %s port %v is none of its ports", c.Name, which, port)
}

// workloads returns the pod templates of the Deployments and Jobs, by
// kind/name.
func workloads(objs []k8sObject) map[string]k8sObject {
	out := map[string]k8sObject{}
	for _, o := range objs {
		if o.Kind == "Deployment" || o.Kind == "Job" {
			out[o.Kind+"/"+o.Metadata.Name] = o
		}
	}
	return out
}

// checkSecurity checks the security contexts every pod and container of
// the chart must have.
func checkSecurity(t *testing.T, where string, pod podSpec) {
	t.Helper()
	psc := pod.SecurityContext
	require.Equal(t, true, psc["runAsNonRoot"], "%s: pod runAsNonRoot", where)
	require.Equal(t, "RuntimeDefault", dig(psc, "seccompProfile", "type"), "%s: pod seccompProfile", where)
	require.NotNil(t, pod.AutomountServiceAccountToken, "%s: automountServiceAccountToken", where)
	require.False(t, *pod.AutomountServiceAccountToken, "%s: no API token mounted", where)
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		require.Equal(t, true, sc["runAsNonRoot"], "%s %s: runAsNonRoot", where, c.Name)
		require.Equal(t, true, sc["readOnlyRootFilesystem"], "%s %s: readOnlyRootFilesystem", where, c.Name)
		require.Equal(t, false, sc["allowPrivilegeEscalation"], "%s %s: allowPrivilegeEscalation", where, c.Name)
		require.Equal(t, []any{"ALL"}, dig(sc, "capabilities", "drop"), "%s %s: capabilities dropped", where, c.Name)
		require.Nil(t, dig(sc, "capabilities", "add"), "%s %s: no capability added", where, c.Name)
		require.Nil(t, sc["privileged"], "%s %s: not privileged", where, c.Name)
	}
}

// credentialKey matches a setting's name that holds a credential or a URL
// (URLs carry passwords): password, secret, token, ..._url (not
// inbox_database_url_env, which names a variable).
var credentialKey = regexp.MustCompile(`(?i)(^|[_.-])(password|passwd|secret|token)($|[_.-])|(^|[_.-])url$`)

// urlWithPassword matches a URL whose user info holds a password.
var urlWithPassword = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:[^/@\s]*@`)

// secretsIn lists what looks like a secret in a ConfigMap's data: a key
// named as a credential, a URL with a password, and the same in the keys
// and values of a YAML document held by a data value.
func secretsIn(data map[string]string) []string {
	var found []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				p := strings.TrimPrefix(path+"."+k, ".")
				if credentialKey.MatchString(k) {
					found = append(found, "key "+p)
				}
				walk(p, x)
			}
		case []any:
			for i, x := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), x)
			}
		case string:
			if urlWithPassword.MatchString(v) {
				found = append(found, "a URL with a password at "+path)
			}
		}
	}
	for k, v := range data {
		if credentialKey.MatchString(k) {
			found = append(found, "data key "+k)
		}
		if urlWithPassword.MatchString(v) {
			found = append(found, "a URL with a password in data "+k)
		}
		var doc any
		if yaml.Unmarshal([]byte(v), &doc) == nil {
			walk(k, doc)
		}
	}
	sort.Strings(found)
	return found
}

// The check that keeps secrets out of ConfigMaps finds them.
func TestHelmSecretCheckFindsSecrets(t *testing.T) {
	t.Parallel()
	for _, bad := range []map[string]string{
		{"FERRY_DATABASE_URL": "postgres://ferry@db/shop"},
		{"ferry.yaml": "database_url: postgres://ferry:pw@db:5432/shop\n"},
		{"ferry.yaml": "relay:\n  broker_url: nats://127.0.0.1:4222\n"},
		{"ferry.yaml": "console:\n  password: hunter2\n"},
		{"ferry.yaml": "x:\n  - {api_token: abc}\n"},
		{"ferry.yaml": "relay:\n  note: see amqps://ferry:s3cret@mq:5671/\n"},
		{"secret": "x"},
		{"FERRY_CONSOLE_SECRET": "0123456789abcdef0123456789abcdef"},
		{"FERRY_CONSOLE_PASSWORD": "hunter2"},
	} {
		require.NotEmpty(t, secretsIn(bad), "%v", bad)
	}
	for _, good := range []map[string]string{
		{"ferry.yaml": "table: outbox_event\nrelay:\n  queue: points\n  routing_key: [orders.*.paid]\n"},
		{"FERRY_TABLE": "outbox_event", "FERRY_AMQP_QUEUE": "points"},
		{"ferry.yaml": "reconcile:\n  effects:\n    - {name: a, inbox_database_url_env: POINTS_DATABASE_URL}\n"},
	} {
		require.Empty(t, secretsIn(good), "%v", good)
	}
}

// The chart, rendered with each values set: the relay's and the console's
// probes on their paths and ports; the security contexts; no secret in a
// ConfigMap and no credential in a plain variable; the URLs from the
// Secret the values name; the migrate Job a pre-install and pre-upgrade
// hook that needs no object of the release; the disruption budget over
// the relays; the relays' grace period longer than their shutdown timeout.
func TestHelmTemplate(t *testing.T) {
	t.Parallel()
	bin := helmBinary(t)
	for name, values := range valueSets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			objs := render(t, bin, values)
			secret := "ferry"
			if name == "all-on" {
				secret = "ferry-urls"
			}

			relay := one(t, objs, "Deployment", "-relay")
			require.Len(t, relay.Spec.Template.Spec.Containers, 1)
			rc := relay.Spec.Template.Spec.Containers[0]
			require.Equal(t, "relay", rc.Args[0])
			checkProbe(t, rc, rc.LivenessProbe, "livenessProbe", "/healthz")
			checkProbe(t, rc, rc.ReadinessProbe, "readinessProbe", "/readyz")
			require.NotEmpty(t, dig(rc.Resources, "requests", "cpu"))
			require.NotEmpty(t, dig(rc.Resources, "limits", "memory"))
			require.GreaterOrEqual(t, *relay.Spec.Replicas, 2, "relays share a table: two survive a node")

			pdb := one(t, objs, "PodDisruptionBudget", "-relay")
			require.Equal(t, dig(relay.raw, "spec", "selector", "matchLabels"), dig(pdb.raw, "spec", "selector", "matchLabels"),
				"the budget covers the relays")
			for k, v := range dig(relay.raw, "spec", "selector", "matchLabels").(map[string]any) {
				require.Equal(t, v, relay.Spec.Template.Metadata.Labels[k], "the relays' pods carry the selector's labels")
			}
			svc := one(t, objs, "Service", "-relay-metrics")
			require.Equal(t, dig(relay.raw, "spec", "selector", "matchLabels"), dig(svc.raw, "spec", "selector"))

			// The relay's config file is the ConfigMap it mounts, named by
			// FERRY_CONFIG; its shutdown timeout is shorter than the grace
			// period.
			file := configFileOf(t, objs, relay.Spec.Template.Spec, rc)
			var cfg struct {
				Relay map[string]any
			}
			require.NoError(t, yaml.Unmarshal([]byte(file), &cfg))
			shutdown, err := strconv.Atoi(strings.TrimSuffix(fmt.Sprint(cfg.Relay["shutdown_timeout"]), "s"))
			require.NoError(t, err, "shutdown_timeout in whole seconds")
			require.Greater(t, relay.Spec.Template.Spec.TerminationGracePeriodSeconds, shutdown,
				"the kill comes after the relay finished its batches")

			job := one(t, objs, "Job", "-migrate")
			hooks := strings.Split(job.Metadata.Annotations["helm.sh/hook"], ",")
			sort.Strings(hooks)
			require.Equal(t, []string{"pre-install", "pre-upgrade"}, hooks, "migrate runs before the relays on install and upgrade")
			require.Contains(t, strings.Split(job.Metadata.Annotations["helm.sh/hook-delete-policy"], ","), "before-hook-creation")
			_, err = strconv.Atoi(job.Metadata.Annotations["helm.sh/hook-weight"])
			require.NoError(t, err, "hook-weight")
			js := job.Spec.Template.Spec
			require.Equal(t, "Never", js.RestartPolicy)
			require.Len(t, js.Containers, 1)
			require.Equal(t, []string{"migrate"}, js.Containers[0].Args)
			// A hook runs before the release's objects exist: it may read
			// only the Secret the user created.
			require.Empty(t, js.Volumes, "the migrate hook mounts nothing of the release")
			require.Empty(t, js.Containers[0].EnvFrom)

			console := byKind(objs, "Deployment")
			delete(console, relay.Metadata.Name)
			if name == "defaults" {
				require.Empty(t, console, "the console is off by default")
			} else {
				cd := one(t, objs, "Deployment", "-console")
				require.Len(t, cd.Spec.Template.Spec.Containers, 1)
				cc := cd.Spec.Template.Spec.Containers[0]
				require.Equal(t, "console", cc.Args[0])
				checkProbe(t, cc, cc.LivenessProbe, "livenessProbe", "/healthz")
				checkProbe(t, cc, cc.ReadinessProbe, "readinessProbe", "/healthz")
				// The users file: --users-file, mounted from a Secret.
				i := slices.Index(cc.Args, "--users-file")
				require.GreaterOrEqual(t, i, 0, "the console's operators come from --users-file")
				users := cc.Args[i+1]
				mounted := false
				for _, m := range cc.VolumeMounts {
					if strings.HasPrefix(users, m.MountPath+"/") {
						for _, v := range cd.Spec.Template.Spec.Volumes {
							mounted = mounted || (v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == "ferry-console-users")
						}
					}
				}
				require.True(t, mounted, "--users-file %s is on a volume of Secret ferry-console-users", users)
				csvc := one(t, objs, "Service", "-console")
				require.Equal(t, dig(cd.raw, "spec", "selector", "matchLabels"), dig(csvc.raw, "spec", "selector"))
				configFileOf(t, objs, cd.Spec.Template.Spec, cc)
			}

			for where, w := range workloads(objs) {
				checkSecurity(t, where, w.Spec.Template.Spec)
				for _, c := range w.Spec.Template.Spec.Containers {
					for _, e := range c.Env {
						if credentialKey.MatchString(e.Name) {
							require.Empty(t, e.Value, "%s %s: %s is a credential: a secretKeyRef, never a value", where, c.Name, e.Name)
							require.NotNil(t, e.ValueFrom, "%s %s: %s", where, c.Name, e.Name)
							require.NotNil(t, e.ValueFrom.SecretKeyRef, "%s %s: %s from a Secret", where, c.Name, e.Name)
						}
						if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && strings.HasPrefix(e.Name, "FERRY_") &&
							!strings.Contains(where, "console") {
							require.Equal(t, secret, e.ValueFrom.SecretKeyRef.Name, "%s %s: %s from secret.name", where, c.Name, e.Name)
						}
					}
				}
			}
			for n, cm := range byKind(objs, "ConfigMap") {
				require.Empty(t, secretsIn(cm.Data), "ConfigMap %s holds what looks like a secret", n)
			}

			if name != "all-on" {
				require.Empty(t, byKind(objs, "ServiceMonitor"))
				require.Empty(t, byKind(objs, "PrometheusRule"))
				require.Empty(t, byKind(objs, "Ingress"))
				return
			}
			// Every optional object: the ServiceMonitor scrapes the
			// metrics Service's port; the PrometheusRule holds ferry's
			// rules as they are; the Ingress serves the console's host
			// over TLS from the Secret.
			sm := one(t, objs, "ServiceMonitor", "-relay")
			require.Equal(t, dig(sm.raw, "spec", "selector", "matchLabels"), anyMap(svc.Metadata.Labels, dig(sm.raw, "spec", "selector", "matchLabels")))
			require.Len(t, sm.Spec.Endpoints, 1)
			require.Equal(t, "/metrics", sm.Spec.Endpoints[0].Path)
			require.Equal(t, "metrics", sm.Spec.Endpoints[0].Port)
			require.Equal(t, "metrics", svc.Spec.Ports[0].Name)
			require.Equal(t, "prometheus", sm.Metadata.Labels["release"])

			pr := one(t, objs, "PrometheusRule", "-alerts")
			want, err := os.ReadFile(rulesFile)
			require.NoError(t, err)
			var wantDoc map[string]any
			require.NoError(t, yaml.Unmarshal(want, &wantDoc))
			require.Equal(t, wantDoc["groups"], dig(pr.raw, "spec", "groups"), "the PrometheusRule holds %s", rulesFile)

			ing := one(t, objs, "Ingress", "-console")
			require.Len(t, ing.Spec.TLS, 1)
			require.Equal(t, "ferry-console-tls", ing.Spec.TLS[0].SecretName)
			require.Equal(t, []string{"ferry.example.com"}, ing.Spec.TLS[0].Hosts)
			require.Equal(t, "ferry.example.com", ing.Spec.Rules[0].Host)
			require.Equal(t, one(t, objs, "Service", "-console").Metadata.Name,
				dig(ing.raw, "spec", "rules").([]any)[0].(map[string]any)["http"].(map[string]any)["paths"].([]any)[0].(map[string]any)["backend"].(map[string]any)["service"].(map[string]any)["name"])

			// The log relay's settings reach the config file.
			require.Equal(t, "log", cfg.Relay["source"])
			require.Equal(t, "ferry_orders", cfg.Relay["log_slot"])
			require.Equal(t, "20s", cfg.Relay["log_lease"])
		})
	}
}

// anyMap is labels as the map type of want, for require.Equal: only the
// keys of want.
func anyMap(labels map[string]string, want any) map[string]any {
	out := map[string]any{}
	for k := range want.(map[string]any) {
		if v, ok := labels[k]; ok {
			out[k] = v
		}
	}
	return out
}

// configFileOf returns the config file container c reads: FERRY_CONFIG,
// on a volume of one of objs' ConfigMaps.
func configFileOf(t *testing.T, objs []k8sObject, pod podSpec, c container) string {
	t.Helper()
	path := ""
	for _, e := range c.Env {
		if e.Name == "FERRY_CONFIG" {
			path = e.Value
		}
	}
	require.NotEmpty(t, path, "container %s: FERRY_CONFIG", c.Name)
	cms := byKind(objs, "ConfigMap")
	for _, m := range c.VolumeMounts {
		rest, ok := strings.CutPrefix(path, m.MountPath+"/")
		if !ok {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cm, ok := cms[v.ConfigMap.Name]
				require.True(t, ok, "container %s: ConfigMap %s is rendered", c.Name, v.ConfigMap.Name)
				file, ok := cm.Data[rest]
				require.True(t, ok, "container %s: ConfigMap %s has %s", c.Name, v.ConfigMap.Name, rest)
				return file
			}
		}
	}
	t.Fatalf("container %s: FERRY_CONFIG %s is on no ConfigMap volume", c.Name, path)
	return ""
}

// The chart refuses values that would put a URL or a credential in a
// ConfigMap, an Ingress without TLS, a console without users, or a grace
// period shorter than the shutdown timeout.
func TestHelmRefusesBadValues(t *testing.T) {
	t.Parallel()
	bin := helmBinary(t)
	for _, c := range []struct{ name, set, want string }{
		{"BrokerURLInSettings", "relay.settings.broker_url=amqp://u:p@mq/", "URLs and credentials come from the existing Secret"},
		{"PasswordInConsoleSettings", "console.enabled=true,console.usersSecret.name=u,console.settings.password=x", "URLs and credentials"},
		{"DatabaseURLInConsoleConfig", "console.enabled=true,console.usersSecret.name=u,console.extraConfig.database_url=x", "URLs and credentials"},
		{"OwnedSetting", "relay.settings.http_addr=:1", "set by the chart from a value of its own"},
		{"NoSecret", "secret.name=", "secret.name"},
		{"ShortGrace", "relay.terminationGracePeriodSeconds=20", "must exceed relay.shutdownTimeoutSeconds"},
		{"ConsoleWithoutUsers", "console.enabled=true", "console.usersSecret.name"},
		{"ReplicasWithoutFormKey", "console.enabled=true,console.usersSecret.name=u,console.replicas=2,console.formKeyKey=", "console.formKeyKey"},
		{"IngressWithoutTLS", "console.enabled=true,console.usersSecret.name=u,console.ingress.enabled=true,console.ingress.host=h", "tlsSecretName"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := helm(t, bin, "template", "ferry", chartDir, "--set", c.set)
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
		})
	}
}

// valueKey is a key of values.yaml: its path, its comment, its value.
type valueKey struct {
	path    string
	comment string
	value   *yaml.Node
}

// valueKeys walks the mappings of a values file: every key, and whether
// it is a leaf (a scalar, a list or an empty mapping: a row of the
// README's table).
func valueKeys(t *testing.T, src []byte) (all, leaves []valueKey) {
	t.Helper()
	var doc yaml.Node
	require.NoError(t, yaml.Unmarshal(src, &doc))
	require.Equal(t, yaml.DocumentNode, doc.Kind)
	var walk func(prefix string, m *yaml.Node)
	walk = func(prefix string, m *yaml.Node) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			key := valueKey{path: strings.TrimPrefix(prefix+"."+k.Value, "."), comment: k.HeadComment, value: v}
			all = append(all, key)
			if v.Kind == yaml.MappingNode && len(v.Content) > 0 {
				walk(key.path, v)
			} else {
				leaves = append(leaves, key)
			}
		}
	}
	walk("", doc.Content[0])
	return all, leaves
}

// undocumented lists the keys of a values file without a comment above
// them.
func undocumented(t *testing.T, src []byte) []string {
	t.Helper()
	all, _ := valueKeys(t, src)
	var out []string
	for _, k := range all {
		if strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(k.comment), "#")) == "" {
			out = append(out, k.path)
		}
	}
	return out
}

// valuesRow matches a row of the README's values table: key, default
// (the value's JSON), description.
var valuesRow = regexp.MustCompile("^\\| `([^`]+)` \\| `([^`]*)` \\| (.*\\S) \\|$")

// Every key of values.yaml has a comment above it, and every value (a
// leaf: scalar, list or empty mapping) is a row of the chart README's
// table with its default as JSON; the table has no row of a value that
// does not exist.
func TestHelmValuesDocumented(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(chartValues)
	require.NoError(t, err)
	require.Empty(t, undocumented(t, src), "%s: keys without a comment above them", chartValues)
	// The check finds a key without its comment.
	require.Equal(t, []string{"a.c"}, undocumented(t, []byte("# A.\na:\n  # B.\n  b: 1\n  c: 2\n")))

	readme, err := os.ReadFile(chartReadme)
	require.NoError(t, err)
	rows := map[string]string{}
	for line := range strings.Lines(string(readme)) {
		if m := valuesRow.FindStringSubmatch(strings.TrimRight(line, "\n")); m != nil {
			require.NotContains(t, rows, m[1], "%s: %s has two rows", chartReadme, m[1])
			rows[m[1]] = m[2]
		}
	}
	_, leaves := valueKeys(t, src)
	require.NotEmpty(t, leaves)
	for _, k := range leaves {
		var v any
		require.NoError(t, k.value.Decode(&v))
		want, err := json.Marshal(v)
		require.NoError(t, err)
		got, ok := rows[k.path]
		require.True(t, ok, "%s: the values table has no row `%s`", chartReadme, k.path)
		require.Equal(t, string(want), got, "%s: the default of %s", chartReadme, k.path)
		delete(rows, k.path)
	}
	require.Empty(t, slices.Sorted(maps.Keys(rows)), "%s: rows of values that values.yaml does not have", chartReadme)
}

// unknownValues lists the keys of a values file src that the chart does
// not have (Helm ignores them): a key is known when it is a key of
// values.yaml, or lies under one whose default is a list or an empty
// mapping (relay.settings, podAnnotations...).
func unknownValues(t *testing.T, chart, src []byte) []string {
	t.Helper()
	all, leaves := valueKeys(t, chart)
	known := map[string]bool{}
	for _, k := range all {
		known[k.path] = true
	}
	var out []string
	_, given := valueKeys(t, src)
next:
	for _, k := range given {
		if known[k.path] {
			continue
		}
		for _, l := range leaves {
			if strings.HasPrefix(k.path, l.path+".") {
				continue next
			}
		}
		out = append(out, k.path)
	}
	return out
}

// Every values file of the chart's ci/ directory sets values the chart
// has: a misspelt key, which Helm ignores, fails here.
func TestHelmCIValuesAreValues(t *testing.T) {
	t.Parallel()
	chart, err := os.ReadFile(chartValues)
	require.NoError(t, err)
	files, err := filepath.Glob(chartDir + "/ci/*-values.yaml")
	require.NoError(t, err)
	require.Len(t, files, 2)
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		require.Empty(t, unknownValues(t, chart, src), "%s sets values the chart does not have", f)
	}
	// The check finds them.
	require.Equal(t, []string{"relay.declar", "relay.podDisruptionBudget.minAvailble"}, unknownValues(t, chart,
		[]byte("relay:\n  declar: true\n  settings: {queue: q}\n  podDisruptionBudget: {minAvailble: 1}\n  podAnnotations: {a: b}\n")))
}

// The chart's alert rules are deploy/prometheus/ferry-alerts.yml, byte for
// byte (a PrometheusRule can only hold a file of the chart).
func TestHelmAlertRulesAreTheDeployRules(t *testing.T) {
	t.Parallel()
	want, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	got, err := os.ReadFile(chartAlerts)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "%s differs from %s: cp deploy/%s deploy/%s", chartAlerts, rulesFile, rulesFile, chartAlerts)
}

// codeBlocks returns the fenced blocks of lang in a Markdown page (those
// after the heading "## " + section, up to the next "## ", when section
// is set), each with the prose line before it.
func codeBlocks(t *testing.T, page, section, lang string) (blocks []string, before []string) {
	t.Helper()
	b, err := os.ReadFile(page)
	require.NoError(t, err)
	text := string(b)
	if section != "" {
		_, rest, ok := strings.Cut(text, "\n## "+section+"\n")
		require.True(t, ok, "%s has a section %s", page, section)
		text, _, _ = strings.Cut(rest, "\n## ")
	}
	lines := strings.Split(text, "\n")
	prose := ""
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "```") {
			if strings.TrimSpace(lines[i]) != "" {
				prose = lines[i]
			}
			continue
		}
		tag := strings.TrimPrefix(lines[i], "```")
		start := i + 1
		for i++; i < len(lines) && lines[i] != "```"; i++ {
		}
		if tag == lang {
			blocks = append(blocks, strings.Join(lines[start:i], "\n")+"\n")
			before = append(before, prose)
		}
	}
	return blocks, before
}

// valuesFileName finds the name of a values file in a line of prose:
// `name-values.yaml`.
var valuesFileName = regexp.MustCompile("`([A-Za-z0-9_.-]+-values\\.yaml)`")

// The documentation of the chart is true of it: every YAML block of the
// chart's README and of docs/deploy.md's Helm section is a values file the
// chart renders, and every helm install, upgrade, template and lint line
// of their sh blocks runs (install and upgrade as helm template with the
// same arguments), its -f files being the YAML blocks the prose names, or
// files of the repository.
func TestHelmDocsAreTrue(t *testing.T) {
	t.Parallel()
	bin := helmBinary(t)
	chart, err := os.ReadFile(chartValues)
	require.NoError(t, err)
	for _, page := range []struct{ path, section string }{{chartReadme, ""}, {deployDoc, "Helm"}} {
		dir := t.TempDir()
		yamls, before := codeBlocks(t, page.path, page.section, "yaml")
		require.NotEmpty(t, yamls, "%s: YAML blocks", page.path)
		for i, y := range yamls {
			f := filepath.Join(dir, fmt.Sprintf("block-%d.yaml", i))
			if m := valuesFileName.FindStringSubmatch(before[i]); m != nil {
				f = filepath.Join(dir, m[1])
			}
			require.NoError(t, os.WriteFile(f, []byte(y), 0o600))
			require.Empty(t, unknownValues(t, chart, []byte(y)), "%s: a YAML block sets values the chart does not have:\n%s", page.path, y)
			render(t, bin, f)
		}
		shs, _ := codeBlocks(t, page.path, page.section, "sh")
		ran := 0
		for _, sh := range shs {
			for line := range strings.Lines(strings.ReplaceAll(sh, "\\\n", " ")) {
				fields := strings.Fields(line)
				if len(fields) < 2 || fields[0] != "helm" {
					continue
				}
				args := slices.Clone(fields[1:])
				switch args[0] {
				case "install", "upgrade":
					args[0] = "template"
				case "template", "lint":
				default:
					t.Fatalf("%s: helm %s: the test knows no such helm command", page.path, args[0])
				}
				for i := range args {
					// The chart and files are named from the repository's root.
					if i > 0 && (args[i-1] == "-f" || args[i-1] == "--values") {
						if _, err := os.Stat(filepath.Join(dir, args[i])); err == nil {
							args[i] = filepath.Join(dir, args[i])
							continue
						}
					}
					if strings.HasPrefix(args[i], "deploy/") {
						args[i] = strings.TrimPrefix(args[i], "deploy/")
					}
				}
				_, err := helm(t, bin, args...)
				require.NoError(t, err, "%s: %s", page.path, strings.TrimSpace(line))
				ran++
			}
		}
		require.NotZero(t, ran, "%s: helm lines", page.path)
	}
}

// Links of the chart's README lead to files that exist.
func TestHelmReadmeLinksResolve(t *testing.T) {
	t.Parallel()
	for i, line := range proseLines(t, chartReadme) {
		for _, m := range markdownLink.FindAllStringSubmatch(line, -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if strings.Contains(target, "://") || target == "" {
				continue
			}
			_, err := os.Stat(filepath.Join(chartDir, target))
			require.NoError(t, err, "%s:%d links to %s", chartReadme, i+1, m[1])
		}
	}
}

// buildFerry builds the ferry command into a temporary directory, with
// the test binary's -race and -trimpath: the packages it shares with the
// suite's other modules come from the build cache.
func buildFerry(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test builds the ferry command")
	}
	out := filepath.Join(t.TempDir(), "ferry")
	args := []string{"build", "-o", out}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if (s.Key == "-race" || s.Key == "-trimpath") && s.Value == "true" {
				args = append(args, s.Key)
			}
		}
	}
	cmd := exec.Command("go", append(args, "./cmd/ferry")...)
	cmd.Dir = ".."
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/ferry: %s", b)
	return out
}

// secretPlaceholders stand for the values of the Secrets the chart and
// the manifests read (the user creates them): well-formed, never
// connected to.
var secretPlaceholders = map[string]string{
	"FERRY_DATABASE_URL":     "postgres://ferry:secret@db.example:5432/shop",
	"FERRY_BROKER_URL":       "amqp://ferry:secret@mq.example:5672/",
	"FERRY_CONSOLE_SECRET":   "0123456789abcdef0123456789abcdef0123456789abcdef",
	"FERRY_CONSOLE_USER":     "oncall",
	"FERRY_CONSOLE_PASSWORD": "correct horse battery staple",
	"POINTS_DATABASE_URL":    "mysql://ferry:secret@points-db.example:3306/points",
}

// ferrySetting is a line of ferry --print-config.
type ferrySetting struct{ value, source string }

// envRef is a $(VAR) of a container's arguments, which Kubernetes expands.
var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// printConfig runs the command of container c of pod as Kubernetes would
// start it, with --print-config: its arguments, its variables (a Secret's
// from secretPlaceholders; a ConfigMap's data as it holds it), its config
// file (FERRY_CONFIG, from the ConfigMap it mounts, written to a
// temporary file). It returns the settings ferry resolved, by key, and
// the config file ("" for none).
func printConfig(t *testing.T, ferry string, objs []k8sObject, pod podSpec, c container) (map[string]ferrySetting, string) {
	t.Helper()
	env := map[string]string{}
	cms := byKind(objs, "ConfigMap")
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := cms[from.ConfigMapRef.Name]
			require.True(t, ok, "container %s: ConfigMap %s", c.Name, from.ConfigMapRef.Name)
			maps.Copy(env, cm.Data)
		case from.SecretRef != nil:
			keys := []string{"FERRY_DATABASE_URL", "FERRY_BROKER_URL"}
			if c.Args[0] == "console" {
				keys = []string{"FERRY_DATABASE_URL", "FERRY_CONSOLE_USER", "FERRY_CONSOLE_PASSWORD", "FERRY_CONSOLE_SECRET"}
			}
			for _, k := range keys {
				env[k] = secretPlaceholders[k]
			}
		}
	}
	file := ""
	for _, e := range c.Env {
		switch {
		case e.Name == "FERRY_CONFIG":
			file = configFileOf(t, objs, pod, c)
			p := filepath.Join(t.TempDir(), "ferry.yaml")
			require.NoError(t, os.WriteFile(p, []byte(file), 0o600))
			env[e.Name] = p
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			v, ok := secretPlaceholders[e.Name]
			require.True(t, ok, "container %s: no placeholder for %s", c.Name, e.Name)
			env[e.Name] = v
		case e.ValueFrom != nil:
			t.Fatalf("container %s: %s: only secretKeyRef is known to this test", c.Name, e.Name)
		default:
			env[e.Name] = e.Value
		}
	}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = envRef.ReplaceAllStringFunc(a, func(ref string) string {
			if v, ok := env[ref[2:len(ref)-1]]; ok {
				return v
			}
			return ref
		})
	}
	cmd := exec.Command(ferry, append(args, "--print-config")...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "container %s: ferry %s --print-config:\n%s\nconfig file:\n%s", c.Name, strings.Join(args, " "), out, file)
	settings := map[string]ferrySetting{}
	cols := regexp.MustCompile(`\s{2,}`)
	for i, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := cols.Split(strings.TrimSpace(line), 3)
		require.Len(t, f, 3, "--print-config line %q", line)
		if i > 0 {
			settings[f[0]] = ferrySetting{value: f[1], source: f[2]}
		}
	}
	require.NotEmpty(t, settings)
	return settings, file
}

// fileKeys lists the settings of a config file: a key of a nested
// mapping is section.key.
func fileKeys(t *testing.T, file string) []string {
	t.Helper()
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(file), &doc))
	var out []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok {
				walk(prefix+k+".", sub)
				continue
			}
			out = append(out, prefix+k)
		}
	}
	walk("", doc)
	sort.Strings(out)
	return out
}

// The chart runs ferry as it accepts: every container of every Deployment
// and Job, rendered with each values set, started as Kubernetes would
// start it (its arguments, variables and config file) with --print-config,
// which parses and checks every setting and connects to nothing; and every
// key of its config file is a setting the command reads from the file. The
// plain manifests of deploy/kubernetes stay in step with the chart set as
// ci/manifests-values.yaml: the same settings as ferry resolves them, the
// same probes, ports, resources, security contexts, replicas, grace period
// and disruption budget.
func TestHelmCommandsFerryAccepts(t *testing.T) {
	t.Parallel()
	bin := helmBinary(t)
	ferry := buildFerry(t)
	for name, values := range valueSets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			objs := render(t, bin, values)
			ran := 0
			for where, w := range workloads(objs) {
				for _, c := range w.Spec.Template.Spec.Containers {
					settings, file := printConfig(t, ferry, objs, w.Spec.Template.Spec, c)
					ran++
					if file == "" {
						continue
					}
					for _, k := range fileKeys(t, file) {
						s, ok := settings[k]
						require.True(t, ok, "%s %s: ferry %s reads no setting %s", where, c.Name, c.Args[0], k)
						require.True(t, strings.HasPrefix(s.source, "file "), "%s %s: %s comes from %s, not the config file", where, c.Name, k, s.source)
					}
				}
			}
			require.GreaterOrEqual(t, ran, 2, "the relay and the migration at least")
		})
	}
	t.Run("ManifestsInStep", func(t *testing.T) {
		t.Parallel()
		chart := render(t, bin, manifestsValues)
		for _, c := range []struct {
			file, component string
			differ          []string // settings that differ by design
		}{
			{"kubernetes/relay.yaml", "relay", nil},
			// The chart names its operators in a users file; the
			// manifest takes one user from its Secret.
			{"kubernetes/console.yaml", "console", []string{"console.users_file"}},
		} {
			b, err := os.ReadFile(c.file)
			require.NoError(t, err)
			plain := decodeObjects(t, c.file, b)
			pd := one(t, plain, "Deployment", "-"+c.component)
			cd := one(t, chart, "Deployment", "-"+c.component)
			require.Equal(t, *pd.Spec.Replicas, *cd.Spec.Replicas, "%s: replicas", c.file)
			pp, cp := pd.Spec.Template.Spec, cd.Spec.Template.Spec
			require.Equal(t, pp.TerminationGracePeriodSeconds, cp.TerminationGracePeriodSeconds, "%s: grace period", c.file)
			require.Equal(t, cp.SecurityContext, pp.SecurityContext, "%s: the pod's security context", c.file)
			require.Equal(t, cp.AutomountServiceAccountToken, pp.AutomountServiceAccountToken, "%s: automountServiceAccountToken", c.file)
			require.Equal(t, cp.EnableServiceLinks, pp.EnableServiceLinks, "%s: enableServiceLinks", c.file)
			for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/component"} {
				require.Equal(t, dig(cd.raw, "spec", "selector", "matchLabels", k), dig(pd.raw, "spec", "selector", "matchLabels", k),
					"%s: selector label %s", c.file, k)
			}
			for k, v := range cd.Spec.Template.Metadata.Annotations {
				if strings.HasPrefix(k, "prometheus.io/") {
					require.Equal(t, v, pd.Spec.Template.Metadata.Annotations[k], "%s: annotation %s", c.file, k)
				}
			}
			require.Len(t, pp.Containers, 1)
			require.Len(t, cp.Containers, 1)
			pc, cc := pp.Containers[0], cp.Containers[0]
			require.Equal(t, cc.Args[:3], pc.Args[:3], "%s: the command and its --http-addr", c.file)
			require.Equal(t, cc.Ports, pc.Ports, "%s: ports", c.file)
			require.Equal(t, cc.LivenessProbe, pc.LivenessProbe, "%s: livenessProbe", c.file)
			require.Equal(t, cc.ReadinessProbe, pc.ReadinessProbe, "%s: readinessProbe", c.file)
			require.Equal(t, cc.Resources, pc.Resources, "%s: resources", c.file)
			require.Equal(t, cc.SecurityContext, pc.SecurityContext, "%s: the container's security context", c.file)
			// The settings, as ferry resolves them from the manifest's
			// variables and from the chart's config file.
			ps, _ := printConfig(t, ferry, plain, pp, pc)
			cs, _ := printConfig(t, ferry, chart, cp, cc)
			require.Equal(t, slices.Sorted(maps.Keys(cs)), slices.Sorted(maps.Keys(ps)), "%s: settings", c.file)
			for k, s := range cs {
				if !slices.Contains(c.differ, k) {
					require.Equal(t, s.value, ps[k].value, "%s: setting %s (chart: from %s; manifest: from %s)", c.file, k, s.source, ps[k].source)
				}
			}
			// The Service in front.
			suffix := "-console"
			if c.component == "relay" {
				suffix = "-relay-metrics"
				require.Equal(t, one(t, chart, "PodDisruptionBudget", "-relay").Spec.MinAvailable,
					one(t, plain, "PodDisruptionBudget", "-relay").Spec.MinAvailable, "%s: minAvailable", c.file)
			}
			require.Equal(t, one(t, chart, "Service", suffix).Spec.Ports, one(t, plain, "Service", suffix).Spec.Ports, "%s: Service ports", c.file)
		}
	})
}

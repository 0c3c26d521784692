package main

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// deployed is a ferry command as a deployment file runs it: its
// arguments and the variables it sets.
type deployed struct {
	file string
	args []string
	env  map[string]string
}

// secretPlaceholders stand, by command, for the values of the Secrets and
// environment files the deployment files read (the user writes them):
// well-formed, never connected to.
var secretPlaceholders = map[string]map[string]string{
	"relay": {
		"FERRY_DATABASE_URL": "postgres://ferry:secret@db.example:5432/shop",
		"FERRY_BROKER_URL":   "amqp://ferry:secret@mq.example:5672/",
	},
	"console": {
		"FERRY_DATABASE_URL":     "postgres://oncall:secret@db.example:5432/shop",
		"FERRY_CONSOLE_USER":     "oncall",
		"FERRY_CONSOLE_PASSWORD": "correct horse battery staple",
		"FERRY_CONSOLE_SECRET":   "0123456789abcdef0123456789abcdef0123456789abcdef",
	},
}

// kubernetesCommands reads the containers of the Deployments under
// deploy/kubernetes, with the ConfigMap data they load.
func kubernetesCommands(t *testing.T) []deployed {
	t.Helper()
	files, err := filepath.Glob("../../deploy/kubernetes/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	type container struct {
		Args    []string `yaml:"args"`
		EnvFrom []struct {
			ConfigMapRef *struct{ Name string } `yaml:"configMapRef"`
			SecretRef    *struct{ Name string } `yaml:"secretRef"`
		} `yaml:"envFrom"`
		Env []struct{ Name, Value string } `yaml:"env"`
	}
	type doc struct {
		Kind     string
		Metadata struct{ Name string }
		Data     map[string]string
		Spec     struct {
			Template struct {
				Spec struct{ Containers []container }
			}
		}
	}
	var out []deployed
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var docs []doc
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		for {
			var d doc
			if err := dec.Decode(&d); errors.Is(err, io.EOF) {
				break
			} else {
				require.NoError(t, err, f)
			}
			docs = append(docs, d)
		}
		configMaps := map[string]map[string]string{}
		for _, d := range docs {
			if d.Kind == "ConfigMap" {
				configMaps[d.Metadata.Name] = d.Data
			}
		}
		for _, d := range docs {
			if d.Kind != "Deployment" {
				continue
			}
			for _, c := range d.Spec.Template.Spec.Containers {
				env := map[string]string{}
				for _, from := range c.EnvFrom {
					switch {
					case from.ConfigMapRef != nil:
						data, ok := configMaps[from.ConfigMapRef.Name]
						require.True(t, ok, "%s: ConfigMap %s is not in the file", f, from.ConfigMapRef.Name)
						for k, v := range data {
							env[k] = v
						}
					case from.SecretRef != nil:
						require.NotEmpty(t, c.Args, f)
						for k, v := range secretPlaceholders[c.Args[0]] {
							if _, set := env[k]; !set {
								env[k] = v
							}
						}
					}
				}
				for _, e := range c.Env {
					env[e.Name] = e.Value
				}
				out = append(out, deployed{file: f + " " + d.Metadata.Name, args: c.Args, env: env})
			}
		}
	}
	return out
}

// systemdCommands reads ExecStart and Environment= of the units under
// deploy/systemd; the EnvironmentFile is stood in for by the placeholders.
func systemdCommands(t *testing.T) []deployed {
	t.Helper()
	files, err := filepath.Glob("../../deploy/systemd/*.service")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var out []deployed
	for _, f := range files {
		fh, err := os.Open(f)
		require.NoError(t, err)
		d := deployed{file: f, env: map[string]string{}}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			switch {
			case strings.HasPrefix(line, "ExecStart="):
				fields := strings.Fields(strings.TrimPrefix(line, "ExecStart="))
				require.Equal(t, "/usr/local/bin/ferry", fields[0], "%s: ExecStart runs the installed binary", f)
				d.args = fields[1:]
			case strings.HasPrefix(line, "Environment="):
				k, v, ok := strings.Cut(strings.Trim(strings.TrimPrefix(line, "Environment="), `"`), "=")
				require.True(t, ok, "%s: %s", f, line)
				d.env[k] = v
			}
		}
		require.NoError(t, sc.Err())
		fh.Close()
		require.NotEmpty(t, d.args, "%s: no ExecStart", f)
		for k, v := range secretPlaceholders[d.args[0]] {
			if _, set := d.env[k]; !set {
				d.env[k] = v
			}
		}
		out = append(out, d)
	}
	return out
}

// settingVariables returns the FERRY_* variables the command named by
// args reads.
func settingVariables(t *testing.T, args []string) map[string]bool {
	t.Helper()
	root := newRoot()
	cmd, _, err := root.Find(args)
	require.NoError(t, err, "%v", args)
	vars := map[string]bool{envConfig: true}
	add := func(fs *pflag.FlagSet) {
		fs.VisitAll(func(f *pflag.Flag) {
			for _, v := range f.Annotations["env"] {
				vars[v] = true
			}
		})
	}
	for c := cmd; c != nil; c = c.Parent() {
		add(c.LocalFlags())
		add(c.PersistentFlags())
	}
	if cmd.Name() == "console" {
		for _, v := range []string{envConsoleUser, envConsolePassword, envConsoleToken, envConsoleSecret} {
			vars[v] = true
		}
	}
	return vars
}

// The deployment files run ferry as it accepts: every FERRY_* variable
// they set is one the command reads, and the command with their arguments
// and variables passes its checks (--print-config, which connects to
// nothing).
func TestDeployFilesAreSettingsFerryAccepts(t *testing.T) {
	t.Parallel()
	for _, d := range append(kubernetesCommands(t), systemdCommands(t)...) {
		require.NotEmpty(t, d.args, d.file)
		vars := settingVariables(t, d.args)
		var env []string
		for k, v := range d.env {
			require.True(t, vars[k], "%s: %s is no setting of ferry %s", d.file, k, d.args[0])
			env = append(env, k+"="+v)
		}
		cmd := exec.Command(os.Args[0], append(d.args, "--print-config")...)
		cmd.Env = append(append(os.Environ(), envExecMain+"=1"), env...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s: ferry %s --print-config: %s", d.file, strings.Join(d.args, " "), out)
		for k := range d.env {
			switch k {
			case envConfig, envConsoleUser, envConsolePassword, envConsoleToken, envConsoleSecret:
				continue // read directly, not settings --print-config lists
			}
			require.Contains(t, string(out), k, "%s: --print-config shows where %s came from", d.file, k)
		}
	}
}

// Package layout_test checks the shape of ferry's module graph: what each
// library module requires, what a user's module gets when it imports a
// store and a broker, and what each library package and the ferry command
// link. It reads the workspace with the go command.
package layout_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"go/version"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const core = "github.com/ferrydev/ferry"

// codeNeeds is the lowest Go release ferry's own code builds with, by
// module: its standard library calls (slog.DiscardHandler, testing.B.Loop)
// need 1.24; the console's http.CrossOriginProtection 1.25.
var codeNeeds = map[string]string{"": "1.24.0", "ferryconsole": "1.25.0"}

// clients names each library module's own client library (module path
// prefixes): no other library module may require or link it.
var clients = map[string][]string{
	"ferrystore/ferrymysql":  {"github.com/go-sql-driver/mysql"},
	"ferrystore/ferrypg":     {"github.com/jackc/pgx"},
	"ferrystore/ferrysqlite": {"modernc.org/sqlite"},
	"ferrybroker/ferryamqp":  {"github.com/rabbitmq/amqp091-go"},
	"ferrybroker/ferrynats":  {"github.com/nats-io/nats.go"},
	"ferrybroker/ferrykafka": {"github.com/twmb/franz-go"},
	"ferryprom":              {"github.com/prometheus/client_golang"},
	"ferryotel":              {"go.opentelemetry.io/otel"},
	"ferryredis":             {"github.com/redis/go-redis"},
	"ferrywatermill":         {"github.com/ThreeDotsLabs/watermill"},
}

// companions names the library modules that extend another: a log feed
// reads its database through the client (and the URL parsing) of that
// database's store, which any user of the feed imports already. A
// companion may require that module and its client, and nothing else of
// another module's.
var companions = map[string]string{
	"ferrylog/ferrybinlog":   "ferrystore/ferrymysql",
	"ferrylog/ferrypgoutput": "ferrystore/ferrypg",
}

// allowed reports whether library module m may require or link path, a
// module's own client or ferry module.
func allowed(m, other string) bool { return other == m || companions[m] == other }

// testBed is what no library module requires and no library package or
// ferry command links: servers and fakes for tests, browser drivers, the
// fault proxy, the CLI's own libraries.
var testBed = []string{
	"github.com/twmb/franz-go/pkg/kfake",
	"github.com/nats-io/nats-server",
	"github.com/chromedp",
	"github.com/Shopify/toxiproxy",
	"github.com/spf13/cobra",
	"github.com/spf13/pflag",
	core + "/internal/testsvc",
	core + "/integration",
	core + "/examples",
	core + "/chaos",
	core + "/cmd",
	core + "/internal/open",
	core + "/internal/natsembed",
}

// has reports whether path is prefix or lies under it.
func has(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

func hasAny(path string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return has(path, p) })
}

// root returns the workspace's directory.
func root(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	out := run(t, ".", nil, "go", "env", "GOWORK")
	if out == "" || out == "off" {
		t.Skip("not in ferry's workspace (go.work)")
	}
	return filepath.Dir(out)
}

// modules reads scripts/modules.txt: every module's directory, and which
// are library modules.
func modules(t *testing.T, dir string) (all, library []string) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "scripts", "modules.txt"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 || strings.HasPrefix(fs[0], "#") {
			continue
		}
		all = append(all, fs[0])
		if fs[1] == "L" {
			library = append(library, fs[0])
		}
	}
	require.NoError(t, sc.Err())
	require.Contains(t, library, ".", "the core is a library module")
	return all, library
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, ee.Stderr)
	}
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

type goMod struct {
	Module  struct{ Path string }
	Go      string
	Require []struct {
		Path, Version string
		Indirect      bool
	}
	Replace []struct {
		Old, New struct{ Path, Version string }
	}
}

func readGoMod(t *testing.T, dir string) goMod {
	t.Helper()
	var m goMod
	require.NoError(t, json.Unmarshal([]byte(run(t, dir, nil, "go", "mod", "edit", "-json")), &m))
	return m
}

// Each library module requires only what its packages and their tests
// need: of ferry's modules only the core, no other module's client, no test
// bed; and no module carries a replace directive.
func TestLibraryModulesRequireOnlyTheirOwn(t *testing.T) {
	t.Parallel()
	dir := root(t)
	all, library := modules(t, dir)
	for _, m := range all {
		require.Empty(t, readGoMod(t, filepath.Join(dir, m)).Replace, "%s/go.mod has replace directives: go.work ties the modules", m)
	}
	for _, m := range library {
		t.Run(strings.ReplaceAll(m, "/", "_"), func(t *testing.T) {
			mod := readGoMod(t, filepath.Join(dir, m))
			var reqs []string
			for _, r := range mod.Require {
				reqs = append(reqs, r.Path)
				if has(r.Path, core) && !(companions[m] != "" && r.Path == core+"/"+companions[m]) {
					require.Equal(t, core, r.Path, "%s requires another of ferry's modules", m)
				}
				require.False(t, hasAny(r.Path, testBed), "%s requires %s", m, r.Path)
				for other, cs := range clients {
					if !allowed(m, other) {
						require.False(t, hasAny(r.Path, cs), "%s requires %s, %s's client", m, r.Path, other)
					}
				}
			}
			if m == "." {
				direct := 0
				for _, r := range mod.Require {
					if !r.Indirect {
						direct++
					}
				}
				require.LessOrEqual(t, direct, 2, "the core requires %v", reqs)
			}
			// The go line is the lowest the module can have: the code's
			// floor (codeNeeds; go vet's stdversion check holds each
			// module's code to its own go line) or what a requirement
			// needs, whichever is higher. A higher line would raise the
			// go line of every user's module for nothing.
			need := "go" + codeNeeds[""]
			if v, ok := codeNeeds[m]; ok {
				need = "go" + v
			}
			goLines := map[string]string{}
			for _, l := range strings.Split(run(t, filepath.Join(dir, m), nil, "go", "list", "-m", "-f", "{{.Path}} {{.GoVersion}}", "all"), "\n") {
				if p, v, ok := strings.Cut(l, " "); ok && v != "" {
					goLines[p] = v
				}
			}
			for _, r := range mod.Require {
				if v, ok := goLines[r.Path]; ok && !has(r.Path, core) && version.Compare("go"+v, need) > 0 {
					need = "go" + v
				}
			}
			require.LessOrEqual(t, version.Compare("go"+mod.Go, need), 0,
				"%s says go %s; its code and requirements need only %s", m, mod.Go, need)
			t.Logf("%s (go %s) requires %s", mod.Module.Path, mod.Go, strings.Join(reqs, " "))
		})
	}
}

// A user's module that imports the core, ferrypg and ferryamqp gets only
// what those need in its module graph (go list -m all): pgx, amqp091-go,
// uuid, their own dependencies and testify, nothing of the other adapters
// and nothing of the test bed.
func TestUserModuleGraph(t *testing.T) {
	t.Parallel()
	dir := root(t)
	user := t.TempDir()
	mods := map[string]string{core: ".", core + "/ferrystore/ferrypg": "ferrystore/ferrypg",
		core + "/ferrybroker/ferryamqp": "ferrybroker/ferryamqp"}
	gomod := "module example.com/orders\n\ngo 1.26.0\n\n"
	for path, d := range mods {
		// The modules are not tagged yet: the user's module takes them
		// from this checkout, as it would take them from a release.
		gomod += "replace " + path + " => " + filepath.Join(dir, d) + "\n"
	}
	require.NoError(t, os.WriteFile(filepath.Join(user, "go.mod"), []byte(gomod), 0o644))
	main := `package main

import (
	"github.com/ferrydev/ferry"
	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrystore/ferrypg"
)

var (
	_ = ferry.NewRelay
	_ = ferrypg.Open
	_ = ferryamqp.Dial
)

func main() {}
`
	require.NoError(t, os.WriteFile(filepath.Join(user, "main.go"), []byte(main), 0o644))
	env := []string{"GOWORK=off", "GOFLAGS=-mod=mod"}
	run(t, user, env, "go", "mod", "tidy")
	list := strings.Fields(run(t, user, env, "go", "list", "-m", "-f", "{{.Path}}", "all"))
	t.Logf("go list -m all of a module importing ferry, ferrypg and ferryamqp (%d modules):\n%s", len(list), strings.Join(list, "\n"))
	// pgx, amqp091-go, uuid and testify, and what their own go.mod files
	// require (the graph holds a dependency's requirements one level down:
	// goleak is amqp091-go's, x/tools and x/mod are x/text's, kr/pretty and
	// check.v1 are yaml's).
	allowed := []string{"example.com/orders", core, "github.com/jackc/", "golang.org/x/sync", "golang.org/x/text",
		"golang.org/x/tools", "golang.org/x/mod", "github.com/rabbitmq/amqp091-go", "go.uber.org/goleak", "github.com/google/uuid",
		"github.com/stretchr/", "github.com/davecgh/go-spew", "github.com/pmezard/go-difflib", "go.yaml.in/yaml", "gopkg.in/yaml",
		"github.com/kr/", "gopkg.in/check.v1"}
	banned := append([]string{"github.com/go-sql-driver/mysql", "modernc.org/", "github.com/nats-io/", "github.com/twmb/",
		"github.com/prometheus/", "go.opentelemetry.io/", "github.com/redis/", "google.golang.org/grpc"}, testBed...)
	for _, p := range list {
		require.False(t, slices.ContainsFunc(banned, func(b string) bool { return strings.HasPrefix(p, b) }),
			"the user's module graph holds %s", p)
		ok := slices.ContainsFunc(allowed, func(a string) bool { return strings.HasPrefix(p, a) })
		if has(p, core) && p != core {
			ok = p == core+"/ferrystore/ferrypg" || p == core+"/ferrybroker/ferryamqp"
		}
		require.True(t, ok, "the user's module graph holds %s", p)
	}
	require.Contains(t, list, "github.com/jackc/pgx/v5")
	require.Contains(t, list, "github.com/rabbitmq/amqp091-go")
	// The user's go line is raised only as far as a third-party module of
	// its graph needs: ferry's own go lines are no higher than that.
	need := "go1.0"
	for _, l := range strings.Split(run(t, user, env, "go", "list", "-m", "-f", "{{.Path}} {{.GoVersion}}", "all"), "\n") {
		if p, v, ok := strings.Cut(l, " "); ok && v != "" && !has(p, core) && p != "example.com/orders" && version.Compare("go"+v, need) > 0 {
			need = "go" + v
		}
	}
	require.Equal(t, 0, version.Compare("go"+readGoMod(t, user).Go, need), "the user's go line %s; its dependencies need %s",
		readGoMod(t, user).Go, need)
}

// goDeps lists the packages a build of pkgs links (go list -deps, without
// tests).
func goDeps(t *testing.T, dir string, pkgs ...string) []string {
	t.Helper()
	return strings.Fields(run(t, dir, nil, "go", append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, pkgs...)...))
}

// What a program links when it imports one library package: no test bed,
// no crash code, no fault proxy, no test library, and no other adapter's
// client. The test-support packages (the conformance suites and the
// brokers' test helpers) may link testify and the test environment, and
// nothing else of the test bed.
func TestLibraryPackagesLinkNoTestBed(t *testing.T) {
	t.Parallel()
	dir := root(t)
	_, library := modules(t, dir)
	harness := []string{core + "/internal/testenv", core + "/internal/faultnet", "github.com/stretchr/testify"}
	crash := []string{core + "/internal/fault"}
	for _, m := range library {
		pattern := core + "/" + m + "/..."
		if m == "." {
			pattern = core + "/..."
		}
		lines := strings.Split(run(t, dir, nil, "go", "list", "-f", "{{.Module.Path}} {{.ImportPath}}", pattern), "\n")
		for _, line := range lines {
			modPath, pkg, _ := strings.Cut(line, " ")
			want := core
			if m != "." {
				want = core + "/" + m
			}
			if modPath != want || strings.Contains(pkg, "/internal/") {
				continue // another module's package, or the module's machinery (linked only through its packages)
			}
			support := strings.HasSuffix(pkg, "test")
			t.Run(strings.TrimPrefix(pkg, core+"/"), func(t *testing.T) {
				for _, dep := range goDeps(t, dir, pkg) {
					require.False(t, hasAny(dep, testBed), "%s links %s", pkg, dep)
					require.False(t, hasAny(dep, crash), "%s links the crash code: %s", pkg, dep)
					if !support {
						require.False(t, hasAny(dep, harness), "%s links %s", pkg, dep)
					}
					for other, cs := range clients {
						if !allowed(m, other) {
							require.False(t, hasAny(dep, cs), "%s links %s, %s's client", pkg, dep, other)
						}
					}
				}
			})
		}
	}
}

// The in-memory store (ferrymem) links the standard library and the core's
// own packages, nothing else: a user's unit test that runs on it gets no
// module it did not have (no driver, not even uuid or testify).
func TestMemStoreLinksOnlyTheCore(t *testing.T) {
	t.Parallel()
	requireLinksOnlyTheCore(t, core+"/ferrystore/ferrymem")
}

// The test helpers for users (ferrytest) link the standard library and
// the core's own packages, nothing else: a user's unit test that publishes
// to its in-memory broker gets no module it did not have.
func TestTestHelpersLinkOnlyTheCore(t *testing.T) {
	t.Parallel()
	requireLinksOnlyTheCore(t, core+"/ferrytest")
}

// requireLinksOnlyTheCore checks that pkg links the standard library and
// the core module's own packages, and neither testify nor the test bed.
func requireLinksOnlyTheCore(t *testing.T, pkg string) {
	t.Helper()
	out := run(t, root(t), nil, "go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{.Module.Path}}{{end}}", pkg)
	lines := strings.Split(out, "\n")
	require.Contains(t, lines, pkg+" "+core, "go list read the package")
	for _, line := range lines {
		dep, mod, _ := strings.Cut(line, " ")
		require.Equal(t, core, mod, "%s links %s, of module %s", pkg, dep, mod)
		require.NotContains(t, dep, "testify", "%s links %s", pkg, dep)
		require.NotContains(t, dep, "/internal/testenv", "%s links the test bed: %s", pkg, dep)
	}
}

// The ferry command (what runs `ferry relay`) links no test bed: not the
// reference shop, not the crash code, not the test services, the fault
// proxy or a test library.
func TestCommandLinksNoTestBed(t *testing.T) {
	t.Parallel()
	dir := root(t)
	banned := []string{core + "/examples", core + "/internal/fault", core + "/internal/testsvc", core + "/internal/testenv",
		core + "/internal/faultnet", core + "/chaos", core + "/integration", "github.com/stretchr/testify",
		"github.com/twmb/franz-go/pkg/kfake", "github.com/chromedp", "github.com/Shopify/toxiproxy"}
	deps := goDeps(t, dir, core+"/cmd/ferry")
	require.Contains(t, deps, core+"/ferrystore/ferrypg", "go list read the command's packages")
	for _, dep := range deps {
		require.False(t, hasAny(dep, banned), "the ferry command links %s", dep)
	}
}

package layout_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/internal/testsvc"
)

// A service of a user's, a module of its own outside ferry's workspace,
// requires ferry the ordinary way before the first tag: scripts/require.go,
// run from the clone, writes requirements of ferry's modules at the version
// they are tagged with next and replace directives to the clone's
// directories; then, with GOWORK=off, go mod tidy, go build and go vet
// work in the service, and the program runs: the recipe of
// docs/recipes.md, against the test PostgreSQL and RabbitMQ.
// Nothing in the clone changes.
func TestServiceModuleRequiresFerryOutsideTheWorkspace(t *testing.T) {
	t.Parallel()
	testsvc.Slow(t, "a service module tidied and built outside the workspace")
	dir := root(t)
	testsvc.Postgres(t) // skips, or fails with FERRY_REQUIRE_SERVICES=1
	testsvc.RabbitMQ(t)
	// The program is the PostgreSQL + RabbitMQ recipe of docs/recipes.md,
	// as a user copies it into a module of their own: it makes a schema,
	// an exchange and a queue of its own, and drops them when it ends.
	env := []string{"DATABASE_URL=" + testsvc.URL(testsvc.EnvPostgres), "BROKER_URL=" + testsvc.URL(testsvc.EnvAMQP)}
	const applied = "order 42 paid; user 7 has 10 points (deliveries: 1, applied: 1)"

	before := cloneState(t, dir)
	svc := newServiceModule(t, programFiles(t, filepath.Join(dir, "examples", "recipes", "pgrabbit")))
	requireFerry(t, dir, svc)
	out := buildAndRun(t, svc, env...)
	require.Contains(t, out, applied, "the program's output")

	mod := readGoMod(t, svc)
	versions := map[string]string{}
	for _, r := range mod.Require {
		versions[r.Path] = r.Version
		if has(r.Path, core) || has(r.Path, "github.com/jackc/pgx/v5") || r.Path == "github.com/rabbitmq/amqp091-go" {
			// What the program imports is a direct requirement, as after
			// go get: not one that go mod tidy marks // indirect.
			require.False(t, r.Indirect, "%s/go.mod requires %s // indirect", svc, r.Path)
		}
	}
	for _, p := range []string{core, core + "/ferrystore/ferrypg", core + "/ferrybroker/ferryamqp"} {
		require.Equal(t, "v0.1.0", versions[p], "%s/go.mod requires %s at %q", svc, p, versions[p])
	}
	require.Contains(t, versions, "github.com/jackc/pgx/v5")
	requireReplaced(t, dir, svc, false)

	t.Run("Relative", func(t *testing.T) {
		requireFerry(t, dir, svc, "-relative")
		requireReplaced(t, dir, svc, true)
		require.Contains(t, buildAndRun(t, svc, env...), applied, "the program's output")
	})

	t.Run("DropBeforeTheTag", func(t *testing.T) {
		// Without the replace directives the versions required are fetched:
		// before they are tagged, -drop refuses and changes nothing; after,
		// it drops every replace directive of ferry's.
		gomod, err := os.ReadFile(filepath.Join(svc, "go.mod"))
		require.NoError(t, err)
		cmd := exec.Command("go", "run", "scripts/require.go", "-drop", svc)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			require.Contains(t, string(out), "Nothing was changed")
			after, err := os.ReadFile(filepath.Join(svc, "go.mod"))
			require.NoError(t, err)
			require.Equal(t, string(gomod), string(after), "-drop failed, and changed %s/go.mod", svc)
			return
		}
		for _, r := range readGoMod(t, svc).Replace {
			require.False(t, has(r.Old.Path, core), "-drop left the replace directive of %s", r.Old.Path)
		}
	})

	require.Equal(t, before, cloneState(t, dir), "the go.work, go.mod and go.sum files of the clone changed")
}

// The command refuses, and writes nothing, when it cannot do what it is
// for: a directory without go.mod, a module inside the clone, and GOWORK
// naming the clone's go.work (which would build the service with ferry's
// workspace instead of its own go.mod).
func TestRequireCommandRefuses(t *testing.T) {
	t.Parallel()
	dir := root(t)
	before := cloneState(t, dir)
	svc := newServiceModule(t, map[string]string{"main.go": "package main\n\nimport _ \"github.com/ferrydev/ferry\"\n\nfunc main() {}\n"})
	gomod, err := os.ReadFile(filepath.Join(svc, "go.mod"))
	require.NoError(t, err)
	for _, c := range []struct {
		name, arg, env, says string
	}{
		{"NoGoMod", t.TempDir(), "", "has no go.mod"},
		{"InsideTheClone", filepath.Join(dir, "examples"), "", "lies inside the clone"},
		{"CloneWorkspace", svc, filepath.Join(dir, "go.work"), "is the clone's workspace"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command("go", "run", "scripts/require.go", "-notidy", c.arg)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GOWORK="+c.env)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "%s", out)
			require.Contains(t, string(out), c.says)
		})
	}
	after, err := os.ReadFile(filepath.Join(svc, "go.mod"))
	require.NoError(t, err)
	require.Equal(t, string(gomod), string(after))
	require.Equal(t, before, cloneState(t, dir), "the go.work, go.mod and go.sum files of the clone changed")
}

// newServiceModule makes a module example.com/orders in a temporary
// directory, outside ferry's workspace, of the files given (name to
// source), and returns its directory.
func newServiceModule(t *testing.T, files map[string]string) string {
	t.Helper()
	svc, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(svc, "go.mod"), []byte("module example.com/orders\n\ngo 1.24.0\n"), 0o644))
	for name, src := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(svc, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(svc, name), []byte(src), 0o644))
	}
	return svc
}

// programFiles reads the Go files of a program's directory (not its
// tests), for newServiceModule.
func programFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		files[e.Name()] = string(b)
	}
	require.NotEmpty(t, files, "no Go files in %s", dir)
	return files
}

// requireFerry runs scripts/require.go from the clone on the service, as
// its documentation says, with no GOWORK of the test's.
func requireFerry(t *testing.T, dir, svc string, flags ...string) {
	t.Helper()
	out := run(t, dir, []string{"GOWORK="}, "go", append(append([]string{"run", "scripts/require.go"}, flags...), svc)...)
	t.Logf("scripts/require.go %s:\n%s", strings.Join(append(flags, svc), " "), out)
}

// buildAndRun tidies, builds and vets the service outside any workspace,
// with go.mod read-only for the build and vet, runs the program with env
// and returns its output.
func buildAndRun(t *testing.T, svc string, env ...string) string {
	t.Helper()
	off := []string{"GOWORK=off"}
	run(t, svc, off, "go", "mod", "tidy")
	bin := filepath.Join(svc, "bin", "service")
	run(t, svc, off, "go", "build", "-mod=readonly", "-o", bin, ".")
	run(t, svc, off, "go", "vet", "-mod=readonly", "./...")
	ctx := testsvc.Context(t, 2*time.Minute)
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the program: %s", out)
	t.Logf("the program: %s", out)
	return string(out)
}

// requireReplaced checks that the service's go.mod replaces every library
// module of ferry's, of every version, with its directory in the clone:
// by an absolute path, or one relative to the service.
func requireReplaced(t *testing.T, dir, svc string, relative bool) {
	t.Helper()
	_, library := modules(t, dir)
	replaced := map[string]string{}
	for _, r := range readGoMod(t, svc).Replace {
		require.Empty(t, r.Old.Version, "the replace directive of %s names a version", r.Old.Path)
		replaced[r.Old.Path] = r.New.Path
	}
	for _, m := range library {
		path := readGoMod(t, filepath.Join(dir, m)).Module.Path
		target, ok := replaced[path]
		require.True(t, ok, "%s/go.mod does not replace %s", svc, path)
		require.Equal(t, !relative, filepath.IsAbs(target), "%s => %s", path, target)
		if relative {
			require.True(t, strings.HasPrefix(target, "../"), "%s => %s", path, target)
			target = filepath.Join(svc, target)
		}
		require.Equal(t, realPath(t, filepath.Join(dir, m)), realPath(t, target), "%s => %s", path, target)
	}
}

func realPath(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	require.NoError(t, err)
	return r
}

// cloneState returns what the clone's module files hold: the SHA-256 of
// every go.work, go.work.sum, go.mod and go.sum file, and git's status of
// those files when the clone is a git checkout. Other tests may make
// other files in the clone meanwhile; these only scripts/tidy.sh and go
// work use write.
func cloneState(t *testing.T, dir string) map[string]string {
	t.Helper()
	state := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		switch d.Name() {
		case "go.work", "go.work.sum", "go.mod", "go.sum":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		rel, _ := filepath.Rel(dir, path)
		state[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, state, "go.work")
	cmd := exec.Command("git", "status", "--porcelain", "--", "go.work", "go.work.sum", "*go.mod", "*go.sum")
	cmd.Dir = dir
	out, err := cmd.Output()
	var ee *exec.ExitError
	switch {
	case err == nil:
		state["git status"] = string(out)
	case errors.As(err, &ee), errors.Is(err, exec.ErrNotFound):
		t.Logf("git status in %s: %v (not compared)", dir, err)
	default:
		require.NoError(t, err)
	}
	return state
}

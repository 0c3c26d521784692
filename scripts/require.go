//go:build ignore

// Require makes a module of yours require ferry's modules the ordinary way
// while no version of ferry is tagged. Run from a clone of ferry, it writes
// into your module's go.mod a requirement of each ferry module your code
// imports, at the version ferry's modules require each other at (the next
// tag, v0.1.0), and a replace directive for each of ferry's library modules
// (and any other ferry module required, with the ferry modules it
// requires) pointing at its directory in the clone; then it runs go mod
// tidy there.
//
//	go run scripts/require.go [-relative] [-notidy] DIR [MODULE...]
//	go run scripts/require.go -drop [-notidy] DIR
//
// DIR is your module's directory (it must have a go.mod, and lie outside
// the clone). MODULE names a ferry module to require beyond those DIR's
// code imports, by its directory here (ferrystore/ferrypg) or its path;
// go mod tidy drops it again while nothing imports it. With -relative the
// replace directives hold paths relative to DIR instead of absolute ones.
// With -notidy go mod tidy is not run. Run it again after your code
// imports another ferry module: go mod tidy alone would require that one
// at v0.0.0-00010101000000-000000000000.
//
// Once the version is tagged, -drop removes ferry's replace directives
// from DIR's go.mod and tidies it: the requirements stay, and go fetches
// the tagged modules as it does any other. It refuses, and changes
// nothing, while a version DIR requires cannot be fetched.
//
// Nothing in the clone is written: the go commands run in DIR, with
// GOWORK=off, so that neither the clone's go.work nor any other workspace
// has a say. Build DIR the same way: GOWORK unset (the command refuses to
// run with GOWORK naming the clone's go.work), or GOWORK=off if a go.work
// lies above DIR.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

const core = "github.com/ferrydev/ferry"

func main() {
	relative := flag.Bool("relative", false, "replace directives with paths relative to DIR (default: absolute paths)")
	notidy := flag.Bool("notidy", false, "do not run go mod tidy in DIR")
	drop := flag.Bool("drop", false, "remove ferry's replace directives from DIR's go.mod (once ferry's version is tagged)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: go run scripts/require.go [-relative] [-notidy] DIR [MODULE...]\n")
		fmt.Fprintf(os.Stderr, "       go run scripts/require.go -drop [-notidy] DIR\n\n")
		fmt.Fprintf(os.Stderr, "Makes the Go module in DIR require ferry's modules, taken from this clone\n")
		fmt.Fprintf(os.Stderr, "(see the comment at the top of scripts/require.go).\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 || *drop && flag.NArg() > 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Args()[1:], *relative, *notidy, *drop); err != nil {
		fmt.Fprintln(os.Stderr, "require:", err)
		os.Exit(1)
	}
}

// module is one of ferry's modules, from scripts/modules.txt.
type module struct {
	dir      string // relative to the clone, "." for the core
	path     string
	library  bool
	requires []string // the ferry modules its go.mod requires
}

// goMod is what go mod edit -json prints, the parts read here.
type goMod struct {
	Module  struct{ Path string }
	Require []struct {
		Path, Version string
		Indirect      bool
	}
	Replace []struct {
		Old, New struct{ Path, Version string }
	}
}

func run(dirArg string, names []string, relative, notidy, drop bool) error {
	clone, err := findClone()
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(dirArg)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s has no go.mod: make it a module first (cd %s && go mod init example.com/yourservice)", dir, dir)
		}
		return err
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	if within(dir, clone) {
		return fmt.Errorf("%s lies inside the clone %s: a module of yours lives outside it, so that the clone stays as it was cloned", dir, clone)
	}
	if err := checkWorkspace(clone, dir); err != nil {
		return err
	}

	mods, version, err := readModules(clone)
	if err != nil {
		return err
	}
	svc, err := readGoMod(dir, "")
	if err != nil {
		return err
	}
	if ferry(svc.Module.Path) {
		return fmt.Errorf("%s is %s, one of ferry's own modules", dir, svc.Module.Path)
	}

	if drop {
		// Without the replace directives go fetches the versions DIR
		// requires: refuse while one cannot be had.
		if err := available(svc); err != nil {
			return fmt.Errorf("%w\nNothing was changed: until the version is tagged (and reachable through GOPROXY), "+
				"the replace directives take ferry from the clone", err)
		}
		var edits []string
		for _, r := range svc.Replace {
			if ferry(r.Old.Path) {
				edits = append(edits, "-dropreplace="+at(r.Old.Path, r.Old.Version))
			}
		}
		if len(edits) == 0 {
			fmt.Printf("%s/go.mod has no replace directive of ferry's modules\n", dir)
		} else {
			if err := goCmd(dir, append([]string{"mod", "edit"}, edits...)...); err != nil {
				return err
			}
			fmt.Printf("dropped %d replace directives of ferry's modules from %s/go.mod\n", len(edits), dir)
		}
		if !notidy {
			if err := goCmd(dir, "mod", "tidy"); err != nil {
				return fmt.Errorf("go mod tidy in %s: %w\n"+
					"Run this again without -drop to take ferry from the clone", dir, err)
			}
		}
		return nil
	}

	// The modules to require: those DIR's code imports, those named, and
	// those DIR requires already (at whatever version it has them).
	need := map[string]bool{}
	imports, err := ferryImports(dir)
	if err != nil {
		return err
	}
	for _, p := range imports {
		if m := owner(mods, p); m != nil {
			need[m.path] = true
		}
	}
	for _, n := range names {
		m := named(mods, n)
		if m == nil {
			var known []string
			for _, m := range mods {
				known = append(known, m.dir)
			}
			return fmt.Errorf("%q is not one of ferry's modules (%s)", n, strings.Join(known, ", "))
		}
		need[m.path] = true
	}
	for _, r := range svc.Require {
		if ferry(r.Path) {
			need[r.Path] = true
		}
	}

	// The modules to replace: every library module, every module required,
	// and every ferry module those require in turn (the library modules
	// require the core; a module such as examples requires internal ones).
	replace := map[string]bool{}
	var visit func(path string)
	visit = func(path string) {
		if replace[path] {
			return
		}
		replace[path] = true
		for _, m := range mods {
			if m.path == path {
				for _, r := range m.requires {
					visit(r)
				}
			}
		}
	}
	for _, m := range mods {
		if m.library || need[m.path] {
			visit(m.path)
		}
	}

	var edits []string
	for _, r := range svc.Replace {
		// A replacement of one version (from an earlier edit by hand)
		// would stand beside the one of every version added below.
		if replace[r.Old.Path] && r.Old.Version != "" {
			edits = append(edits, "-dropreplace="+at(r.Old.Path, r.Old.Version))
		}
	}
	var required, replaced []string
	for _, m := range mods {
		if need[m.path] {
			edits = append(edits, "-require="+m.path+"@"+version)
			required = append(required, m.path)
		}
		if !replace[m.path] {
			continue
		}
		target := filepath.Join(clone, m.dir)
		if relative {
			rel, err := filepath.Rel(dir, target)
			if err != nil {
				return fmt.Errorf("a path from %s to %s: %w", dir, target, err)
			}
			target = filepath.ToSlash(rel)
			if !strings.HasPrefix(target, "../") {
				target = "./" + target
			}
		}
		edits = append(edits, "-replace="+m.path+"="+target)
		replaced = append(replaced, m.path)
	}
	if err := goCmd(dir, append([]string{"mod", "edit"}, edits...)...); err != nil {
		return err
	}
	fmt.Printf("%s/go.mod: requires %s at %s; replaces %d of ferry's modules with their directories in %s\n",
		dir, list(required), version, len(replaced), clone)
	if len(required) == 0 {
		fmt.Printf("Nothing in %s imports ferry yet: once something does, run this again\n"+
			"(go mod tidy alone would require ferry's modules at v0.0.0-00010101000000-000000000000).\n", dir)
	}
	if !notidy {
		if err := goCmd(dir, "mod", "tidy"); err != nil {
			return fmt.Errorf("go mod tidy in %s: %w", dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "vendor", "modules.txt")); err == nil {
		fmt.Printf("%s has a vendor directory: run go mod vendor there again.\n", dir)
	}
	hint := "go build"
	if w, _ := output(dir, nil, "go", "env", "GOWORK"); w != "" && w != "off" {
		hint = "GOWORK=off go build (" + w + " lies above it)"
	}
	if notidy {
		hint = "GOWORK=off go mod tidy, then " + hint
	}
	fmt.Printf("Build %s as any module: %s. Nothing in %s was changed.\n", dir, hint, clone)
	fmt.Printf("Once %s is tagged, drop the replace directives: go run scripts/require.go -drop %s (from the clone)\n", version, dir)
	return nil
}

// available checks that every version of a ferry module that svc requires
// can be fetched (go list -m path@version, outside any module).
func available(svc goMod) error {
	tmp, err := os.MkdirTemp("", "ferry-require-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, r := range svc.Require {
		if !ferry(r.Path) {
			continue
		}
		if _, err := output(tmp, []string{"GOWORK=off"}, "go", "list", "-m", r.Path+"@"+r.Version); err != nil {
			return fmt.Errorf("%s@%s cannot be fetched: %w", r.Path, r.Version, err)
		}
	}
	return nil
}

// findClone returns the clone's directory: the one this file lies in the
// scripts directory of, or else the first directory from the working
// directory up that has scripts/modules.txt.
func findClone() (string, error) {
	var tries []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		tries = append(tries, filepath.Dir(filepath.Dir(file)))
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		tries = append(tries, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	for _, d := range tries {
		if _, err := os.Stat(filepath.Join(d, "scripts", "modules.txt")); err != nil {
			continue
		}
		if m, err := readGoMod(d, "go.mod"); err == nil && m.Module.Path == core {
			if real, err := filepath.EvalSymlinks(d); err == nil {
				d = real
			}
			return d, nil
		}
	}
	return "", errors.New("not run from a clone of ferry: cd into the clone and run go run scripts/require.go DIR")
}

// checkWorkspace refuses a GOWORK that names the clone's go.work (with it,
// the go command would build DIR with ferry's workspace, not DIR's go.mod),
// and says so when the clone's go.work lists DIR.
func checkWorkspace(clone, dir string) error {
	work := filepath.Join(clone, "go.work")
	if g := os.Getenv("GOWORK"); g != "" && g != "off" && samePath(g, work) {
		return fmt.Errorf("GOWORK=%s is the clone's workspace: with it, go builds %s against the clone's go.work "+
			"and ignores the requirements this writes; unset GOWORK (or set GOWORK=off) and run again", g, dir)
	}
	out, err := output(clone, nil, "go", "work", "edit", "-json", work)
	if err != nil {
		return nil // no go.work, or one the go command cannot read: nothing lists DIR
	}
	var w struct{ Use []struct{ DiskPath string } }
	if json.Unmarshal([]byte(out), &w) != nil {
		return nil
	}
	for _, u := range w.Use {
		p := u.DiskPath
		if !filepath.IsAbs(p) {
			p = filepath.Join(clone, p)
		}
		if samePath(p, dir) {
			fmt.Fprintf(os.Stderr, "note: the clone's go.work uses %s (go work use put it there); "+
				"git -C %s checkout go.work restores the clone's own\n", u.DiskPath, clone)
		}
	}
	return nil
}

// readModules reads scripts/modules.txt and each module's go.mod, and
// returns the modules with the version they require each other at.
func readModules(clone string) ([]*module, string, error) {
	f, err := os.Open(filepath.Join(clone, "scripts", "modules.txt"))
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	var mods []*module
	versions := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 || strings.HasPrefix(fs[0], "#") {
			continue
		}
		m := &module{dir: fs[0], library: len(fs) > 1 && fs[1] == "L"}
		gm, err := readGoMod(clone, filepath.Join(m.dir, "go.mod"))
		if err != nil {
			return nil, "", err
		}
		m.path = gm.Module.Path
		for _, r := range gm.Require {
			if ferry(r.Path) {
				m.requires = append(m.requires, r.Path)
				versions[r.Version] = true
			}
		}
		mods = append(mods, m)
	}
	if err := sc.Err(); err != nil {
		return nil, "", err
	}
	if len(versions) != 1 {
		var vs []string
		for v := range versions {
			vs = append(vs, v)
		}
		return nil, "", fmt.Errorf("ferry's modules should require each other at one version (the next tag); they require %v", vs)
	}
	var version string
	for v := range versions {
		version = v
	}
	return mods, version, nil
}

// ferryImports returns the import paths of ferry's packages that the Go
// files of the module in dir import (tests and every build tag included),
// leaving out vendor, testdata, hidden directories and nested modules.
func ferryImports(dir string) ([]string, error) {
	seen := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != dir {
				if name == "vendor" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p, err := strconv.Unquote(imp.Path.Value); err == nil && ferry(p) {
				seen[p] = true
			}
		}
		return nil
	})
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, err
}

// owner returns the module that holds package p: the one with the longest
// path p lies under.
func owner(mods []*module, p string) *module {
	var best *module
	for _, m := range mods {
		if (p == m.path || strings.HasPrefix(p, m.path+"/")) && (best == nil || len(m.path) > len(best.path)) {
			best = m
		}
	}
	return best
}

// named returns the module named n, by directory or by path.
func named(mods []*module, n string) *module {
	n = strings.TrimSuffix(strings.TrimPrefix(filepath.ToSlash(n), "./"), "/")
	for _, m := range mods {
		if n == m.dir || n == m.path || n == "" && m.dir == "." {
			return m
		}
	}
	return nil
}

func ferry(path string) bool { return path == core || strings.HasPrefix(path, core+"/") }

func at(path, version string) string {
	if version == "" {
		return path
	}
	return path + "@" + version
}

func list(paths []string) string {
	if len(paths) == 0 {
		return "none"
	}
	return strings.Join(paths, ", ")
}

// within reports whether path is dir or lies under it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

func samePath(a, b string) bool {
	ra, errA := filepath.EvalSymlinks(a)
	rb, errB := filepath.EvalSymlinks(b)
	if errA != nil || errB != nil {
		ra, rb = filepath.Clean(a), filepath.Clean(b)
	}
	return ra == rb
}

// readGoMod reads the go.mod file in dir (file "" for dir's own, through
// go mod edit -json, which writes nothing).
func readGoMod(dir, file string) (goMod, error) {
	args := []string{"mod", "edit", "-json"}
	if file != "" {
		args = append(args, file)
	}
	var m goMod
	out, err := output(dir, []string{"GOWORK=off"}, "go", args...)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		return m, fmt.Errorf("go mod edit -json in %s: %w", dir, err)
	}
	return m, nil
}

// goCmd runs go with args in dir, outside any workspace, its output on
// ours.
func goCmd(dir string, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func output(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

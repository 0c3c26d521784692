//go:build ignore

// Testreport prints what a test run cost, from the go test -json files of
// scripts/test.sh: each module's test time and the slowest tests, so that
// growth is seen when it happens.
//
//	go run scripts/testreport.go -modules pkgs.txt -n 15 run.json...
//
// With -failures it also lists every test that failed, with how many of
// its runs failed and the output of its first failure, and exits 1 when
// there is one (scripts/stress.sh).
//
// pkgs.txt has one "package module" pair a line. A module's time is the sum
// of its packages' test binaries' run times (they ran side by side with
// other modules' packages, so the sum is the cost, not the wall time); the
// span is from its first package's start to its last package's end.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// runs counts one test's runs and failures.
type runs struct {
	runs, failed int
	output       []string // of the first failure
	current      []string // of the run in progress
}

type span struct {
	start, end time.Time
	busy       float64
	packages   int
}

func main() {
	modules := flag.String("modules", "", "file of `package module` lines")
	n := flag.Int("n", 15, "how many of the slowest tests to print")
	failures := flag.Bool("failures", false, "list the tests that failed, and exit 1 if one did")
	flag.Parse()
	failed, err := run(*modules, *n, *failures, flag.Args(), os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}

func run(modulesFile string, n int, failures bool, files []string, w io.Writer) (failed bool, err error) {
	moduleOf := map[string]string{}
	if modulesFile != "" {
		b, err := os.ReadFile(modulesFile)
		if err != nil {
			return false, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 {
				moduleOf[f[0]] = f[1]
			}
		}
	}
	type test struct {
		pkg, name string
		elapsed   float64
		failed    bool
	}
	var tests []test
	mods := map[string]*span{}
	starts := map[string]time.Time{}
	byTest := map[string]*runs{}
	resumed := map[string]time.Time{} // when a test last ran or continued
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return false, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) != nil || e.Package == "" {
				continue // a line go test printed outside the JSON stream
			}
			if e.Test != "" {
				key := strings.TrimPrefix(e.Package, "github.com/ferrydev/ferry/") + " " + e.Test
				r := byTest[key]
				if r == nil {
					r = &runs{}
					byTest[key] = r
				}
				switch e.Action {
				case "run":
					r.current = r.current[:0]
				case "output":
					if len(r.current) < 200 {
						r.current = append(r.current, e.Output)
					}
				case "pass", "skip":
					r.runs++
				case "fail":
					r.runs++
					r.failed++
					if r.output == nil {
						r.output = append([]string(nil), r.current...)
					}
				}
			}
			switch {
			case e.Test == "" && e.Action == "start":
				starts[e.Package] = e.Time
			case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
				m := moduleOf[e.Package]
				if m == "" {
					m = e.Package
				}
				s := mods[m]
				if s == nil {
					s = &span{start: starts[e.Package]}
					mods[m] = s
				}
				if st := starts[e.Package]; !st.IsZero() && st.Before(s.start) {
					s.start = st
				}
				if e.Time.After(s.end) {
					s.end = e.Time
				}
				s.busy += e.Elapsed
				s.packages++
			case e.Test != "" && (e.Action == "run" || e.Action == "cont"):
				resumed[e.Package+" "+e.Test] = e.Time
			case e.Test != "" && !strings.Contains(e.Test, "/") && (e.Action == "pass" || e.Action == "fail"):
				// A test whose subtests run in parallel reports 0 s of
				// its own: it took from its last start to its end.
				el := e.Elapsed
				if r, ok := resumed[e.Package+" "+e.Test]; ok {
					el = max(el, e.Time.Sub(r).Seconds())
				}
				tests = append(tests, test{e.Package, e.Test, el, e.Action == "fail"})
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return false, fmt.Errorf("%s: %w", name, err)
		}
	}

	names := make([]string, 0, len(mods))
	for m := range mods {
		names = append(names, m)
	}
	sort.Slice(names, func(i, j int) bool { return mods[names[i]].busy > mods[names[j]].busy })
	fmt.Fprintln(w, "test: time per module (its packages' run time summed; span: first start to last end)")
	for _, m := range names {
		s := mods[m]
		fmt.Fprintf(w, "  %7.1f s  span %6.1f s  %3d packages  %s\n", s.busy, s.end.Sub(s.start).Seconds(), s.packages, m)
	}
	sort.Slice(tests, func(i, j int) bool { return tests[i].elapsed > tests[j].elapsed })
	fmt.Fprintf(w, "test: the %d slowest tests\n", min(n, len(tests)))
	for _, t := range tests[:min(n, len(tests))] {
		mark := ""
		if t.failed {
			mark = "  (failed)"
		}
		fmt.Fprintf(w, "  %7.1f s  %s %s%s\n", t.elapsed, strings.TrimPrefix(t.pkg, "github.com/ferrydev/ferry/"), t.name, mark)
	}
	if !failures {
		return false, nil
	}
	var bad []string
	for k, r := range byTest {
		if r.failed > 0 {
			bad = append(bad, k)
		}
	}
	sort.Strings(bad)
	if len(bad) == 0 {
		fmt.Fprintln(w, "test: no test failed")
		return false, nil
	}
	fmt.Fprintf(w, "test: %d tests failed (a parent fails with its subtests)\n", len(bad))
	for _, k := range bad {
		fmt.Fprintf(w, "  %d of %d runs failed: %s\n", byTest[k].failed, byTest[k].runs, k)
	}
	// Top-level tests first, those of a subtest after; a parent that
	// failed only because a subtest did has nothing of its own to show.
	for _, sub := range []bool{false, true} {
		for _, k := range bad {
			_, name, _ := strings.Cut(k, " ")
			if strings.Contains(name, "/") != sub || !hasOwnOutput(byTest[k].output) {
				continue
			}
			fmt.Fprintf(w, "--- first failure of %s\n%s", k, strings.Join(byTest[k].output, ""))
		}
	}
	return true, nil
}

// hasOwnOutput reports whether a failed test printed more than its run
// and result lines (a parent that failed only because a subtest did has
// nothing of its own).
func hasOwnOutput(lines []string) bool {
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t != "" && !strings.HasPrefix(t, "=== ") && !strings.HasPrefix(t, "--- ") {
			return true
		}
	}
	return false
}

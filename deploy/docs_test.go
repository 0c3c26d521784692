package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docFiles are the repository's documentation pages, relative to this
// directory.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../docs/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	return append([]string{"../README.md", "../CHANGELOG.md"}, pages...)
}

// markdownLink is an inline link or image: [text](target).
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of the documentation leads to a file that exists,
// and every #anchor to a heading of its page.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	anchors := map[string]map[string]bool{}
	for _, page := range docFiles(t) {
		for i, line := range proseLines(t, page) {
			for _, m := range markdownLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), file)
					_, err := os.Stat(path)
					require.NoError(t, err, "%s:%d links to %s, which does not exist", page, i+1, target)
				}
				if anchor == "" {
					continue
				}
				if anchors[path] == nil {
					anchors[path] = markdownAnchors(t, path)
				}
				require.True(t, anchors[path][anchor], "%s:%d links to %s: no such heading in %s", page, i+1, target, path)
			}
		}
	}
}

// proseLines returns the lines of a Markdown page, with those of its code
// blocks blank (a code block's brackets are no links).
func proseLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(string(b), "\n")
	fence := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			fence = !fence
			lines[i] = ""
		} else if fence {
			lines[i] = ""
		}
	}
	return lines
}

// Every Go code block of the documentation is quoted from a Go file of the
// repository — a program under examples/ or an Example function — which
// the test suite builds and runs: a snippet cannot drift from code that
// compiles. Lines are compared without their indentation.
func TestDocsGoBlocksAreQuotedFromBuiltCode(t *testing.T) {
	t.Parallel()
	var sources [][]string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sources = append(sources, trimmed(strings.Split(string(b), "\n")))
		}
		return nil
	})
	require.NoError(t, err)
	blocks := 0
	for _, page := range docFiles(t) {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		lines := strings.Split(string(b), "\n")
		for i := 0; i < len(lines); i++ {
			if lines[i] != "```go" {
				continue
			}
			start := i + 1
			for i++; i < len(lines) && lines[i] != "```"; i++ {
			}
			block := trimmed(lines[start:i])
			blocks++
			require.True(t, quoted(block, sources), "%s:%d: this Go block is in no Go file of the repository; "+
				"quote it from a program under examples/ or an Example function", page, start)
		}
	}
	require.NotZero(t, blocks)
}

// The Go blocks that follow a mention of a recipe program (the last
// program the prose named) are runs of that very program's lines,
// indentation aside: the recipes cannot drift from the programs their
// tests run (examples/recipes).
func TestDocsQuoteTheRecipePrograms(t *testing.T) {
	t.Parallel()
	programs := []string{"examples/recipes/pgrabbit/main.go", "examples/recipes/mariarabbit/main.go"}
	sources := map[string][]string{}
	blocks := map[string]int{}
	for _, p := range programs {
		b, err := os.ReadFile("../" + p)
		require.NoError(t, err)
		sources[p] = trimmed(strings.Split(string(b), "\n"))
	}
	for _, page := range []string{"../docs/recipes.md", "../docs/consuming.md"} {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		doc := strings.Split(string(b), "\n")
		named := "" // the last program the prose named
		for i := 0; i < len(doc); i++ {
			if doc[i] != "```go" {
				for _, p := range programs {
					if strings.Contains(doc[i], p) {
						named = p
					}
				}
				continue
			}
			start := i + 1
			for i++; i < len(doc) && doc[i] != "```"; i++ {
			}
			if named == "" {
				continue
			}
			blocks[named]++
			require.True(t, quoted(trimmed(doc[start:i]), [][]string{sources[named]}),
				"%s:%d: this Go block is not a run of lines of %s", page, start, named)
		}
	}
	for _, p := range programs {
		require.NotZero(t, blocks[p], "no page quotes %s", p)
	}
}

// The README stays a page that gets a newcomer running; the rest is in
// docs/.
func TestReadmeIsShort(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	require.LessOrEqual(t, strings.Count(string(b), "\n"), 260, "README.md: move the detail to a page of docs/")
}

func trimmed(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimSpace(l)
	}
	return out
}

// quoted reports whether block is a run of consecutive lines of one of
// sources.
func quoted(block []string, sources [][]string) bool {
	for _, src := range sources {
	next:
		for i := 0; i+len(block) <= len(src); i++ {
			for j, l := range block {
				if src[i+j] != l {
					continue next
				}
			}
			return true
		}
	}
	return false
}

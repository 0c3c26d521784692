package testsvc

import (
	"bytes"
	"strings"
	"sync"
)

// LogBuffer is an io.Writer that a slog handler may share between
// goroutines, and that a test reads the logged lines from.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Lines returns the logged lines that contain every one of words.
func (b *LogBuffer) Lines(words ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		keep := l != ""
		for _, w := range words {
			keep = keep && strings.Contains(l, w)
		}
		if keep {
			out = append(out, l)
		}
	}
	return out
}

package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildFerry builds the ferry binary of the ferry module this module
// replaces (the repository's root) into dir, and returns its path.
func BuildFerry(ctx context.Context, dir string) (string, error) {
	var out bytes.Buffer
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/ferrydev/ferry")
	list.Stdout, list.Stderr = &out, os.Stderr
	if err := list.Run(); err != nil {
		return "", fmt.Errorf("find the ferry module: %w", err)
	}
	bin := filepath.Join(dir, "ferry")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/ferry")
	build.Dir = strings.TrimSpace(out.String())
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build ferry: %w", err)
	}
	return bin, nil
}

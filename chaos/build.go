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

// BuildShop builds the reference shop's binary (examples/shop/cmd/shop, the
// processes the scenarios run, with their crash points) of the ferry
// module this module replaces (the repository's root) into dir, and
// returns its path.
func BuildShop(ctx context.Context, dir string) (string, error) {
	var out bytes.Buffer
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/ferrydev/ferry")
	list.Stdout, list.Stderr = &out, os.Stderr
	if err := list.Run(); err != nil {
		return "", fmt.Errorf("find the ferry module: %w", err)
	}
	bin := filepath.Join(dir, "shop")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-w", "-o", bin, "./examples/shop/cmd/shop")
	build.Dir = strings.TrimSpace(out.String())
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build the shop: %w", err)
	}
	return bin, nil
}

// BuildKfake builds the chaos suite's Kafka broker (cmd/kfake of this
// module: kfake as a process of its own) into dir, and returns its path.
func BuildKfake(ctx context.Context, dir string) (string, error) {
	var out bytes.Buffer
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/ferrydev/ferry/chaos")
	list.Stdout, list.Stderr = &out, os.Stderr
	if err := list.Run(); err != nil {
		return "", fmt.Errorf("find the chaos module: %w", err)
	}
	bin := filepath.Join(dir, "kfake")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-w", "-o", bin, "./cmd/kfake")
	build.Dir = strings.TrimSpace(out.String())
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build kfake: %w", err)
	}
	return bin, nil
}

// BuildNATSServer builds nats-server, at the version this module
// requires, into dir, and returns its path: the JetStream cluster rows
// need a server newer than the one a distribution may ship
// (sync_interval, 2.10 and later).
func BuildNATSServer(ctx context.Context, dir string) (string, error) {
	var out bytes.Buffer
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/ferrydev/ferry/chaos")
	list.Stdout, list.Stderr = &out, os.Stderr
	if err := list.Run(); err != nil {
		return "", fmt.Errorf("find the chaos module: %w", err)
	}
	bin := filepath.Join(dir, "nats-server")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-w", "-o", bin, "github.com/nats-io/nats-server/v2")
	build.Dir = strings.TrimSpace(out.String())
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build nats-server: %w", err)
	}
	return bin, nil
}

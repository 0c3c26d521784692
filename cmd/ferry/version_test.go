package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ferry --version and ferry version print the version, and the Go
// version, whatever the settings say; a release build's -X main.version
// wins over the module's.
func TestVersion(t *testing.T) {
	// serial: t.Setenv: the CLI reads the process environment, which parallel tests share.
	t.Setenv(envConfig, "/nonexistent/ferry.yaml") // read by no version command
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, out, errOut := ferryCLI(t, args...)
		require.Equal(t, exitOK, code, "%v: %s", args, errOut)
		require.True(t, strings.HasPrefix(out, "ferry "), out)
		require.Contains(t, out, runtime.Version())
		require.Equal(t, 1, strings.Count(out, "\n"), "one line: %q", out)
	}
	code, out, errOut := ferryCLI(t, "version", "--json")
	require.Equal(t, exitOK, code, errOut)
	var v versionJSON
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.NotEmpty(t, v.Version)
	require.Equal(t, runtime.Version(), v.GoVersion)

	old := version
	t.Cleanup(func() { version = old })
	version = "v9.9.9"
	code, out, _ = ferryCLI(t, "--version")
	require.Equal(t, exitOK, code)
	require.True(t, strings.HasPrefix(out, "ferry v9.9.9 "), out)
	code, out, _ = ferryCLI(t, "version", "--json")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, `"version": "v9.9.9"`)
}

package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ferrydev/ferry/internal/buildinfo"
)

// version is ferry's release version, set by release builds:
//
//	go build -ldflags "-X main.version=v0.1.0" ./cmd/ferry
//
// Empty, ferry reports the module version of its build information: a
// release tag when built with go install ...@v0.1.0, a pseudo-version, or
// the newest CHANGELOG version with -devel (v0.1.0-devel) when built from
// a checkout.
var version string

// buildInfo is what ferry --version, the relays' heartbeat rows and
// ferry_build_info report.
func buildInfo() buildinfo.Info { return buildinfo.Read(version) }

// versionJSON is the JSON of ferry version --json.
type versionJSON struct {
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	Time      string `json:"time,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version"`
}

func newVersion() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print ferry's version, the revision it was built from, and the Go version",
		Long: `Prints ferry's version (a release's tag, or the module version Go stamped into
the binary), the VCS revision and commit time it was built from when known
("+dirty" when the working tree had changes), and the Go version. The same as
ferry --version; --json prints it as JSON.`,
		Args: cobra.NoArgs,
		// Reads no setting: it works whatever the environment and the
		// config file say.
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		RunE: func(cmd *cobra.Command, _ []string) error {
			bi := buildInfo()
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), versionJSON{Version: bi.Version, Revision: bi.Revision, Time: bi.Time,
					Modified: bi.Modified, GoVersion: bi.GoVersion})
			}
			fmt.Fprintln(cmd.OutOrStdout(), "ferry "+bi.String())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

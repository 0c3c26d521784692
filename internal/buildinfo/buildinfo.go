// Package buildinfo reads what the running binary knows about the ferry
// code in it: the module's version, the VCS revision and time it was built
// from, and the Go version. ferry --version, the relays' heartbeat rows and
// ferry_build_info report it.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// ModulePath is the path of ferry's core module. ferry's other modules
// (the adapters, the plugins, the command) lie under it and are all tagged
// with the same version.
const ModulePath = "github.com/ferrydev/ferry"

// Release is the version this source tree is: the newest version of
// CHANGELOG.md, tagged or about to be. A build of a checkout, which Go
// stamps "(devel)", reports it as Release+"-devel".
const Release = "v0.1.0"

// ferryModule reports whether path is one of ferry's modules.
func ferryModule(path string) bool {
	return path == ModulePath || strings.HasPrefix(path, ModulePath+"/")
}

// Info describes the ferry code of the running binary.
type Info struct {
	// Version is ferry's module version: a release tag (v0.1.0), a
	// pseudo-version stamped from the checkout's VCS state, Release with
	// "-devel" (v0.1.0-devel) for a build of a checkout without one, or
	// "unknown" when the binary carries no build information.
	Version string
	// Revision and Time are the VCS revision the binary was built from
	// and its commit time (RFC 3339), and Modified says whether the
	// working tree had changes: known when ferry is the binary's main
	// module and Go stamped the VCS state; empty otherwise (a program that
	// imports ferry as a library has its own revision, not ferry's).
	Revision string
	Time     string
	Modified bool
	// GoVersion is the Go release the binary was built with.
	GoVersion string
}

// Read returns the build information of the running binary. override,
// when not empty, is the version to report instead of the module's (a
// release build sets it with -ldflags -X).
func Read(override string) Info {
	info := Info{Version: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		info = fromBuildInfo(bi)
	}
	if override != "" {
		info.Version = override
	}
	return info
}

func fromBuildInfo(bi *debug.BuildInfo) Info {
	info := Info{Version: "unknown", GoVersion: bi.GoVersion}
	if info.GoVersion == "" {
		info.GoVersion = runtime.Version()
	}
	if ferryModule(bi.Main.Path) { // the ferry command, or a test of ferry's
		info.Version = orDevel(bi.Main.Version)
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.time":
				info.Time = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
		return info
	}
	for _, d := range bi.Deps {
		if d.Path != ModulePath {
			continue
		}
		if d.Replace != nil {
			// Replaced by a directory (a checkout) or another version.
			info.Version = orDevel(d.Replace.Version)
		} else {
			info.Version = orDevel(d.Version)
		}
		break
	}
	return info
}

// orDevel returns v, or Release+"-devel" for a build of a checkout.
func orDevel(v string) string {
	if v == "" || v == "(devel)" {
		return Release + "-devel"
	}
	return v
}

// String is the version line of ferry --version: the version, then the
// revision (its first 12 digits, "+dirty" when modified) and its time when
// known, then the Go version.
func (i Info) String() string {
	s := i.Version
	if i.Revision != "" {
		rev := i.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if i.Modified {
			rev += "+dirty"
		}
		s += " (" + rev
		if i.Time != "" {
			s += ", " + i.Time
		}
		s += ")"
	}
	return s + " " + i.GoVersion
}

package buildinfo

import (
	"os"
	"regexp"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFromBuildInfo(t *testing.T) {
	t.Run("FerryIsTheMainModule", func(t *testing.T) {
		info := fromBuildInfo(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: ModulePath, Version: "v1.4.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"},
				{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}})
		require.Equal(t, Info{Version: "v1.4.0", Revision: "0123456789abcdef0123", Time: "2026-01-02T03:04:05Z",
			Modified: true, GoVersion: "go1.26.8"}, info)
		require.Equal(t, "v1.4.0 (0123456789ab+dirty, 2026-01-02T03:04:05Z) go1.26.8", info.String())
	})
	t.Run("TheCommandIsTheMainModule", func(t *testing.T) {
		info := fromBuildInfo(&debug.BuildInfo{GoVersion: "go1.26.8",
			Main:     debug.Module{Path: ModulePath + "/cmd/ferry", Version: "v1.4.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}},
			Deps:     []*debug.Module{{Path: ModulePath, Version: "v1.4.0"}}})
		require.Equal(t, Info{Version: "v1.4.0", Revision: "0123456789abcdef0123", GoVersion: "go1.26.8"}, info)
	})
	t.Run("AnotherModuleIsNotFerry", func(t *testing.T) {
		info := fromBuildInfo(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: ModulePath + "x/app", Version: "v9.0.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "feedface"}}})
		require.Equal(t, Info{Version: "unknown", GoVersion: "go1.26.8"}, info)
	})
	t.Run("CheckoutWithoutVCS", func(t *testing.T) {
		info := fromBuildInfo(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: ModulePath, Version: "(devel)"}})
		require.Equal(t, Release+"-devel go1.26.8", info.String())
	})
	t.Run("FerryIsADependency", func(t *testing.T) {
		info := fromBuildInfo(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/app", Version: "v9.0.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "feedface"}},
			Deps:     []*debug.Module{{Path: "example.com/other", Version: "v1.0.0"}, {Path: ModulePath, Version: "v1.3.2"}}})
		require.Equal(t, Info{Version: "v1.3.2", GoVersion: "go1.26.8"}, info, "the application's revision is not ferry's")
	})
	t.Run("FerryReplacedByACheckout", func(t *testing.T) {
		info := fromBuildInfo(&debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{{Path: ModulePath, Version: "v0.0.0-00010101000000-000000000000",
				Replace: &debug.Module{Path: "../"}}}})
		require.Equal(t, Release+"-devel", info.Version)
		require.NotEmpty(t, info.GoVersion)
	})
}

// Release is the newest version of CHANGELOG.md: a release moves both.
func TestReleaseIsTheChangelogsNewestVersion(t *testing.T) {
	b, err := os.ReadFile("../../CHANGELOG.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^## (v\d+\.\d+\.\d+\S*)`).FindSubmatch(b)
	require.NotNil(t, m, "CHANGELOG.md has no version heading (## vX.Y.Z)")
	require.Equal(t, string(m[1]), Release, "buildinfo.Release and the newest version of CHANGELOG.md")
}

func TestReadOverride(t *testing.T) {
	require.Equal(t, "v2.0.0", Read("v2.0.0").Version)
	require.NotEmpty(t, Read("").Version)
	require.NotEmpty(t, Read("").GoVersion)
}

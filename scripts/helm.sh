#!/usr/bin/env bash
# Installs Helm, pinned, into .bin/ of this repository (git-ignored) when it
# is not there at that version, and prints its path. Helm is a Go program:
# it comes from the Go module proxy (helm.sh/helm/v4), like every other
# dependency, built with the version its release binaries report.
#
#   scripts/helm.sh              install if needed; print .bin/helm
#
# .ci/run lints and renders deploy/helm/ferry with it; deploy/helm_test.go
# finds it in .bin/ (or on the PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
version=v4.3.2
bin=$PWD/.bin
helm=$bin/helm
if [ -x "$helm" ] && [ "$("$helm" version --template '{{.Version}}' 2>/dev/null)" = "$version" ]; then
  echo "$helm"
  exit 0
fi
echo "helm: installing helm.sh/helm/v4 $version into $bin" >&2
mkdir -p "$bin"
# Outside the workspace: the module's own go.mod decides its dependencies.
GOWORK=off GOBIN=$bin GOFLAGS=-buildvcs=false CGO_ENABLED=0 \
  go install -trimpath "-ldflags=-s -X=helm.sh/helm/v4/internal/version.version=$version" \
  "helm.sh/helm/v4/cmd/helm@$version"
got=$("$helm" version --template '{{.Version}}')
if [ "$got" != "$version" ]; then
  echo "helm: $helm reports $got, not $version" >&2
  exit 1
fi
echo "$helm"

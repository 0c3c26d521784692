#!/usr/bin/env bash
# The whole test suite: go test -race in every module of scripts/modules.txt
# (the chaos suite, a module of its own, last and at its reduced size).
# Extra arguments go to every go test run (e.g. -run TestX, -short).
# Exits non-zero when any module fails, after running them all.
set -uo pipefail
cd "$(dirname "$0")/.."
failed=()
for m in $(grep -v '^#' scripts/modules.txt | awk 'NF {print $1}'); do
  timeout=40m
  [ "$m" = chaos ] && timeout=30m
  echo "test: $m"
  if ! (cd "$m" && go test -race -count=1 -timeout "$timeout" "$@" ./...); then
    failed+=("$m")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "test: failed in ${failed[*]}" >&2
  exit 1
fi
echo "test: every module passed"

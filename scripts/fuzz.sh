#!/usr/bin/env bash
# Runs every Go fuzz target of the module (func FuzzXxx in a _test.go file)
# for a short time each: FERRY_FUZZTIME, default 10s. The committed seed
# corpora (testdata/fuzz) already run as plain tests in `go test ./...`;
# this also explores past them. A crasher is written to the package's
# testdata/fuzz/<target>/ and fails the run: commit it with its fix.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FERRY_FUZZTIME:-10s}
targets=$(grep -rlE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . | grep -v '^\./chaos/' | sort)
for file in $targets; do
  pkg=$(dirname "$file")
  for fn in $(grep -oE '^func Fuzz[A-Za-z0-9_]+' "$file" | cut -d' ' -f2); do
    echo "fuzz: $pkg $fn for $fuzztime"
    go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$fuzztime" "$pkg"
  done
done

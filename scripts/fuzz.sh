#!/usr/bin/env bash
# Runs every Go fuzz target of the module (func FuzzXxx in a _test.go file)
# for a short time each: FERRY_FUZZTIME, default 10s. The committed seed
# corpora (testdata/fuzz) already run as plain tests in `go test ./...`;
# this also explores past them. A crasher is written to the package's
# testdata/fuzz/<target>/ and fails the run: commit it with its fix.
#
# -trimpath: the instrumented builds do not depend on where the checkout is,
# so a fresh clone reuses the build cache of an earlier run; -ldflags=-w:
# no DWARF, a third less linking.
#
# FERRY_FUZZ_SKIP lists targets (space-separated) not to explore.
# FERRY_FUZZ_WORKERS sets the fuzzing processes of each target (go test
# -parallel; default one per core).
#
# The fuzzing engine itself sometimes ends a run with "context deadline
# exceeded" as -fuzztime runs out, with no failing input: such a run is
# tried again, up to three times; a failure with an input never is.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FERRY_FUZZTIME:-10s}
workers=()
if [ -n "${FERRY_FUZZ_WORKERS:-}" ]; then
  workers=(-parallel "$FERRY_FUZZ_WORKERS")
fi
skip=" ${FERRY_FUZZ_SKIP:-} "
log=$(mktemp)
trap 'rm -f "$log"' EXIT
targets=$(grep -rlE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . | grep -v '^\./chaos/' | sort)
for file in $targets; do
  pkg=$(dirname "$file")
  for fn in $(grep -oE '^func Fuzz[A-Za-z0-9_]+' "$file" | cut -d' ' -f2); do
    if [[ $skip == *" $fn "* ]]; then
      echo "fuzz: $pkg $fn skipped (FERRY_FUZZ_SKIP); its seed corpus runs in go test"
      continue
    fi
    for try in 1 2 3; do
      echo "fuzz: $pkg $fn for $fuzztime${workers:+ with ${workers[1]} worker(s)}"
      if go test -trimpath -ldflags=-w "${workers[@]}" -run '^$' -fuzz "^${fn}\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$log"; then
        break
      fi
      if grep -q "Failing input written to" "$log" || [ "$try" = 3 ]; then
        exit 1
      fi
      echo "fuzz: $fn: the engine failed without a failing input; again"
    done
  done
done

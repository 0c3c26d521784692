#!/usr/bin/env bash
# The whole test suite: go test -race over the packages of every module of
# scripts/modules.txt in one run, so that packages of different modules run
# side by side (the workspace, go.work, ties them together), then the chaos
# suite (a module of its own) at its reduced size. At the end it prints each
# module's test time and the 15 slowest tests.
#
#   scripts/test.sh              everything (what CI runs)
#   scripts/test.sh -short       the quick tier, before a commit: no chaos,
#                                bulk, browser or bench tests (each says so
#                                when skipped), and without -race unless
#                                FERRY_TEST_RACE=1
#   scripts/test.sh -run TestX   other arguments go to every go test run
#
# FERRY_TEST_BESIDE_CHAOS names a command to run beside the chaos suite
# (CI runs the fuzzing there, scripts/fuzz.sh with one worker): the rows
# leave about a fifth of the two cores idle while their processes wait on
# rates, timeouts and servers. Its output is printed after the suite's,
# and its failure fails the run. In the quick tier it runs after the
# modules' tests.
#
# FERRY_TEST_OUT names a directory to keep the go test -json files in
# (default: a temporary one, removed at the end). Exits non-zero when any
# package failed, after running them all.
set -uo pipefail
cd "$(dirname "$0")/.."

# gotestsum prints one line a package and the whole output of a failed
# test; the JSON it writes feeds the report.
gotestsum=(go run gotest.tools/gotestsum@v1.13.0 --format pkgname-and-test-fails --format-hide-empty-pkg)
short=0
for a in "$@"; do
  case "$a" in -short | -short=true | --short) short=1 ;; esac
done
out=${FERRY_TEST_OUT:-}
tmp_out=
if [ -z "$out" ]; then
  out=$(mktemp -d "${TMPDIR:-/tmp}/ferry-test.XXXXXX")
  tmp_out=$out
fi
mkdir -p "$out"
# The command beside the chaos suite runs in a process group of its own;
# an interrupted run stops it (and the fuzzing it started) rather than
# leaving it behind.
beside_pid=
cleanup() {
  if [ -n "$beside_pid" ] && kill -0 "$beside_pid" 2>/dev/null; then
    kill -TERM -- "-$beside_pid" 2>/dev/null || kill -TERM "$beside_pid" 2>/dev/null
  fi
  if [ -n "$tmp_out" ]; then rm -rf "$tmp_out"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Every package of every module but chaos, and the module it belongs to;
# the modules with the longest tests first, so that they do not start last
# and run alone at the end.
: >"$out/packages.txt"
seen=
for m in cmd/ferry integration examples $(grep -v '^#' scripts/modules.txt | awk 'NF {print $1}'); do
  case " $seen " in *" $m "*) continue ;; esac
  seen="$seen $m"
  [ "$m" = chaos ] && continue
  (cd "$m" && go list -f '{{.ImportPath}} {{.Module.Path}}' ./...) >>"$out/packages.txt" || exit 1
done
pkgs=$(awk '{print $1}' "$out/packages.txt")
(cd chaos && go list -f '{{.ImportPath}} {{.Module.Path}}' ./...) >>"$out/packages.txt" || exit 1

race=-race
if [ "$short" = 1 ] && [ "${FERRY_TEST_RACE:-}" != 1 ]; then
  race=
fi

failed=()
start=$(date +%s)
# -parallel 4: most tests wait on a server, not on the CPU, and own their
# tables, streams and queues (the ones that must run alone say why in a
# "serial:" line and do not call t.Parallel).
echo "test: every module's packages${race:+ (-race)}"
# -trimpath: compiled packages do not depend on where the checkout is, so
# a fresh clone reuses the build cache of an earlier one. -ldflags=-w: the
# test binaries carry no DWARF (stack traces do not need it), which is
# about a third of linking each of the 35 binaries, linked again every run.
"${gotestsum[@]}" --jsonfile "$out/modules.json" -- $race -trimpath -ldflags=-w -count=1 -timeout 30m -parallel 4 "$@" $pkgs || failed+=(modules)
# The conformance subtests that sever watermill-amqp's connections are
# skipped under -race: watermill-amqp v3.0.2 races on its own connection
# state when a connection drops, and the race detector would fail the
# binary whatever they check. They run here, without -race.
if [ -n "$race" ]; then
  echo "test: integration/ferrywatermill's conformance suites again, without -race (watermill-amqp's dropped connections)"
  (cd integration && "${gotestsum[@]}" --jsonfile "$out/norace.json" -- -trimpath -ldflags=-w -count=1 -timeout 10m -run Conformance "$@" ./ferrywatermill/) || failed+=(ferrywatermill-norace)
fi
mid=$(date +%s)
beside=${FERRY_TEST_BESIDE_CHAOS:-}
if [ -n "$beside" ]; then
  echo "test: beside the chaos suite: $beside (its output follows the suite's)"
  set -m # a process group of its own, for cleanup
  (
    b=$(date +%s)
    bash -c "$beside"
    rc=$?
    echo "test: '$beside' took $(($(date +%s) - b)) s, exit status $rc"
    exit $rc
  ) >"$out/beside.log" 2>&1 &
  beside_pid=$!
  set +m
fi
if [ "$short" = 1 ]; then
  echo "test: the chaos suite is skipped in the quick tier (-short)"
else
  # Without -race: the system under test is the shop's processes, which
  # are not race-built (they are the binaries a user runs), and the
  # harness proxies every byte they exchange (toxiproxy, in the test's
  # process), which under -race took a quarter of a core a row. Two rows
  # at a time: a row's processes keep about one of the two cores busy,
  # and a third row only slowed the others down.
  echo "test: the chaos suite (chaos/), at its reduced size"
  (cd chaos && "${gotestsum[@]}" --jsonfile "$out/chaos.json" -- -trimpath -ldflags=-w -count=1 -timeout 30m -parallel 2 "$@" ./...) || failed+=(chaos)
fi
if [ -n "$beside_pid" ]; then
  wait "$beside_pid" || failed+=("'$beside'")
  cat "$out/beside.log"
fi
end=$(date +%s)

go run scripts/testreport.go -modules "$out/packages.txt" -n 15 "$out"/*.json
echo "test: wall time: modules $((mid - start)) s, chaos $((end - mid)) s, in all $((end - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "test: failed in ${failed[*]}" >&2
  exit 1
fi
echo "test: every module passed"

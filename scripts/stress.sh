#!/usr/bin/env bash
# The hunt for verdicts that depend on timing: runs the tests of the given
# packages many times (go test -count) under -race while CPU hogs keep every
# core busy, and lists each test that ever failed, with how often. A test
# whose verdict depends on the machine's load fails here long before it
# fails in CI.
#
#   scripts/stress.sh [-n COUNT] [-hogs N] [-parallel P] PACKAGE... [-- go test flags]
#
#   -n COUNT      runs of each test (default 10)
#   -hogs N       busy loops beside the tests (default: one per core; 0: none)
#   -parallel P   go test -parallel (default 4, as scripts/test.sh)
#   PACKAGE       a package pattern, as go test takes it, from the repository
#                 root (./integration/ferry, ./ferrystore/...): each module's
#                 packages are found through go.work
#
# Example: scripts/stress.sh -n 20 ./integration/ferryprom -- -run Collector
#
# The JSON of the runs is kept in FERRY_STRESS_OUT (default a temporary
# directory, whose name is printed). Exits 1 when any test failed.
set -uo pipefail
cd "$(dirname "$0")/.."

count=10
hogs=$(nproc 2>/dev/null || echo 2)
parallel=4
pkgs=()
while [ $# -gt 0 ]; do
  case "$1" in
  -n) count=$2; shift 2 ;;
  -hogs) hogs=$2; shift 2 ;;
  -parallel) parallel=$2; shift 2 ;;
  --) shift; break ;;
  *) pkgs+=("$1"); shift ;;
  esac
done
if [ ${#pkgs[@]} -eq 0 ]; then
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
out=${FERRY_STRESS_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/ferry-stress.XXXXXX")}
mkdir -p "$out"

# The hogs: stress(1) when installed (Debian package stress), else shell
# loops. They stop when the script does.
hog_pids=()
stop_hogs() { [ ${#hog_pids[@]} -gt 0 ] && kill "${hog_pids[@]}" 2>/dev/null; wait 2>/dev/null; }
trap stop_hogs EXIT
if [ "$hogs" -gt 0 ]; then
  if command -v stress >/dev/null; then
    stress --cpu "$hogs" >/dev/null 2>&1 &
    hog_pids+=($!)
  else
    for ((i = 0; i < hogs; i++)); do
      (while :; do :; done) &
      hog_pids+=($!)
    done
  fi
fi

echo "stress: ${pkgs[*]}, $count runs each, $hogs CPU hogs, -parallel $parallel; JSON in $out"
: >"$out/packages.txt"
rc=0
for p in "${pkgs[@]}"; do
  # A pattern names packages of one module: list them from its directory.
  dir=${p%/...}
  dir=${dir#./}
  while [ ! -f "$dir/go.mod" ] && [ "$dir" != . ] && [ -n "$dir" ]; do dir=$(dirname "$dir"); done
  rel=${p#./}
  rel=${rel#"$dir"}
  rel=${rel#/}
  (cd "$dir" && go list -f '{{.ImportPath}} {{.Module.Path}}' "./$rel") >>"$out/packages.txt" || exit 1
  json="$out/$(echo "$p" | tr -c 'a-zA-Z0-9\n' '_').json"
  (cd "$dir" && FERRY_REQUIRE_SERVICES=${FERRY_REQUIRE_SERVICES:-1} go test -race -json -count="$count" -parallel "$parallel" \
    -timeout 60m "$@" "./$rel" >"$json" 2>&1) || rc=1
done
stop_hogs
go run scripts/testreport.go -modules "$out/packages.txt" -n 10 -failures "$out"/*.json || rc=1
exit $rc

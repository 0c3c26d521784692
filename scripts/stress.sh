#!/usr/bin/env bash
# The hunt for verdicts that depend on timing: runs the tests of the given
# packages many times (go test -count) under -race while CPU hogs keep every
# core busy, and lists each test that ever failed, with how often. A test
# whose verdict depends on the machine's load fails here long before it
# fails in CI.
#
#   scripts/stress.sh [-n COUNT] [-hogs N] [-db] [-parallel P] PACKAGE... [-- go test flags]
#
#   -n COUNT      runs of each test (default 10)
#   -hogs N       busy loops beside the tests (default: one per core; 0: none)
#   -db           a database load beside them too: pgbench -c 4 (TPC-B,
#                 fsynced writes) on a scratch database ferry_stress of each
#                 PostgreSQL the tests use (ports 5432 and 5433), and
#                 mysqlslap -c 4 (mixed reads and writes) on each MariaDB's
#                 (3306 and 3307); the databases are dropped at the end
#   -parallel P   go test -parallel (default 4, as scripts/test.sh)
#   PACKAGE       a package pattern, as go test takes it, from the repository
#                 root (./integration/ferry, ./ferrystore/...): each module's
#                 packages are found through go.work
#
# Example: scripts/stress.sh -n 20 ./integration/ferryprom -- -run Collector
#          scripts/stress.sh -n 5 -db ./integration/ferryhttp -- -run Deadlock
#
# The JSON of the runs is kept in FERRY_STRESS_OUT (default a temporary
# directory, whose name is printed). Exits 1 when any test failed.
set -uo pipefail
cd "$(dirname "$0")/.."

count=10
hogs=$(nproc 2>/dev/null || echo 2)
parallel=4
dbload=0
pkgs=()
while [ $# -gt 0 ]; do
  case "$1" in
  -n) count=$2; shift 2 ;;
  -hogs) hogs=$2; shift 2 ;;
  -parallel) parallel=$2; shift 2 ;;
  -db) dbload=1; shift ;;
  --) shift; break ;;
  *) pkgs+=("$1"); shift ;;
  esac
done
if [ ${#pkgs[@]} -eq 0 ]; then
  sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
out=${FERRY_STRESS_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/ferry-stress.XXXXXX")}
mkdir -p "$out"

# The hogs: stress(1) when installed (Debian package stress), else shell
# loops. They stop when the script does.
hog_pids=()
db_cleanup=()
stop_hogs() {
  [ ${#hog_pids[@]} -gt 0 ] && kill "${hog_pids[@]}" 2>/dev/null
  wait 2>/dev/null
  hog_pids=()
  local c
  for c in "${db_cleanup[@]}"; do eval "$c" >/dev/null 2>&1; done
  db_cleanup=()
}
trap stop_hogs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
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

# The database load: each server that answers gets its scratch database
# and four clients until the script ends.
load=
if [ "$dbload" = 1 ]; then
  for port in 5432 5433; do
    pg="psql -h 127.0.0.1 -p $port -U postgres -qAt"
    if $pg -c 'SELECT 1' >/dev/null 2>&1 && command -v pgbench >/dev/null; then
      $pg -c 'DROP DATABASE IF EXISTS ferry_stress' -c 'CREATE DATABASE ferry_stress' >/dev/null 2>&1 &&
        pgbench -h 127.0.0.1 -p "$port" -U postgres -i -s 4 -q ferry_stress >/dev/null 2>&1 || continue
      pgbench -h 127.0.0.1 -p "$port" -U postgres -n -c 4 -j 1 -T 86400 ferry_stress >/dev/null 2>&1 &
      hog_pids+=($!)
      db_cleanup+=("$pg -c 'DROP DATABASE IF EXISTS ferry_stress WITH (FORCE)'")
      load="$load pgbench:$port"
    fi
  done
  for port in 3306 3307; do
    my="mariadb -h 127.0.0.1 -P $port -u root"
    if $my -e 'SELECT 1' >/dev/null 2>&1 && command -v mysqlslap >/dev/null; then
      mysqlslap -h 127.0.0.1 -P "$port" -u root --create-schema=ferry_stress --concurrency=4 --iterations=1000000 \
        --auto-generate-sql --auto-generate-sql-load-type=mixed --number-of-queries=2000 >/dev/null 2>&1 &
      hog_pids+=($!)
      db_cleanup+=("$my -e 'DROP DATABASE IF EXISTS ferry_stress'")
      load="$load mysqlslap:$port"
    fi
  done
  [ -n "$load" ] || echo "stress: -db: no database answered, or pgbench and mysqlslap are missing" >&2
fi

echo "stress: ${pkgs[*]}, $count runs each, $hogs CPU hogs${load:+, database load:$load}, -parallel $parallel; JSON in $out"
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

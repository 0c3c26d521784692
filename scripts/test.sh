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
#
# The suite stops, restarts and alarms only servers of its own (the
# RabbitMQ node on port 5673 that scripts/services.sh starts, and the
# nodes of the RabbitMQ cluster on ports 5681-5683, which tests kill and
# start again), never a shared one, and leaves no file in the work tree. The script checks both:
# it records each service's listening process and socket before the tests
# (a restart, or RabbitMQ's stop_app and start_app, changes them), the
# shared RabbitMQ's alarms and memory high watermark, and git status; and
# it fails the run when any differs at the end, or an alarm is set.
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

# The services' state, recorded before the tests and checked after them.
# port_of prints the port of a service URL (or its default) when the host
# is this machine's loopback, where ss sees its listener.
port_of() { # url default-port
  local hp=${1#*://}
  hp=${hp#*@}
  hp=${hp%%[/?]*}
  case "$hp" in 127.* | localhost* | \[::1\]*) ;; *) return ;; esac
  case "$hp" in *:[0-9]*) echo "${hp##*:}" ;; *) echo "$2" ;; esac
}
# listeners prints, for each port, the processes listening on it, their
# start times and their sockets' inodes ("down" when none listens).
listeners() {
  local p line pid ino st out
  for p in "$@"; do
    out=
    while read -r line; do
      pid=$(grep -o 'pid=[0-9]*' <<<"$line" | head -n1)
      ino=$(grep -o 'ino:[0-9]*' <<<"$line")
      st=
      [ -n "$pid" ] && st=$(awk '{print "start=" $22}' "/proc/${pid#pid=}/stat" 2>/dev/null)
      out="$out $pid $st $ino"
    done < <(ss -Hltnpe "sport = :$p" 2>/dev/null | sort)
    echo "port $p:${out:- down}"
  done
}
# rabbit_state prints the shared RabbitMQ's AMQP listeners, alarms and
# memory high watermark (rabbitmqctl), or its alarms and memory limit
# (management API), or nothing when neither answers.
rabbit_state() {
  local out
  if out=$(timeout 60 rabbitmqctl -q eval '{[P || {listener,_,amqp,_,_,P,_} <- rabbit_networking:active_listeners()], rabbit_alarm:get_alarms(), vm_memory_monitor:get_vm_memory_high_watermark()}.' 2>/dev/null); then
    echo "rabbitmqctl: $out"
  elif out=$(curl -fsS -m 10 -u "$amqp_user" "http://127.0.0.1:15672/api/nodes" 2>/dev/null); then
    echo "management API:" $(grep -o '"\(mem_alarm\|disk_free_alarm\|mem_limit\)":[^,]*' <<<"$out")
  fi
}
rabbit_alarmed() { # state
  case "$1" in
  rabbitmqctl:*) [[ "$1" != *",[],"* ]] ;;
  management*) [[ "$1" == *':true'* ]] ;;
  *) return 1 ;;
  esac
}
amqp_url=${FERRY_TEST_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}
amqp_user=${amqp_url#*://}
amqp_user=${amqp_user%%@*}
[ "$amqp_user" = "${amqp_url#*://}" ] && amqp_user=guest:guest
# The shared services' ports only: the tests' own RabbitMQ node (5673)
# and cluster (5681-5683) are restarted and killed on purpose, so their
# processes change.
ports=
for u in "${FERRY_TEST_POSTGRES_URL:-x://127.0.0.1} 5432" "${FERRY_TEST_MYSQL_URL:-x://127.0.0.1} 3306" \
  "${FERRY_TEST_REDIS_URL:-x://127.0.0.1} 6379" "${FERRY_TEST_NATS_URL:-x://127.0.0.1} 4222" "$amqp_url 5672" \
  "${FERRY_TEST_MYSQL_BINLOG_URL:-x://127.0.0.1} 3307" "${FERRY_TEST_POSTGRES_LOGICAL_URL:-x://127.0.0.1} 5433"; do
  ports="$ports $(port_of $u)"
done
if command -v ss >/dev/null; then
  listeners $ports >"$out/services.before"
else
  echo "test: ss (iproute2) is missing: the services' processes are not checked" >&2
fi
rabbit_before=$(rabbit_state)
if [ -z "$rabbit_before" ]; then
  echo "test: neither rabbitmqctl nor the management API answers: the shared RabbitMQ's alarms are not checked" >&2
elif rabbit_alarmed "$rabbit_before"; then
  echo "test: the shared RabbitMQ has an alarm set before the tests: $rabbit_before" >&2
fi
amqp_port=$(port_of "$amqp_url" 5672)
if [[ "$rabbit_before" == rabbitmqctl:* && -n "$amqp_port" && "$rabbit_before" != *"$amqp_port"* ]]; then
  echo "test: rabbitmqctl's default node does not listen on port $amqp_port of FERRY_TEST_AMQP_URL: its alarms are checked, not that server's" >&2
fi
tree_before=
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  tree_before=$(git --no-optional-locks status --porcelain --ignored --untracked-files=all)
  tree_check=1
fi
# check_services compares the services and the tree with their state
# before the tests, and says what changed.
check_services() {
  local bad=0 after
  if [ -f "$out/services.before" ]; then
    listeners $ports >"$out/services.after"
    while read -r line; do
      [[ "$line" == *": down" ]] && continue # not there before: none of the suite's
      if ! grep -qxF "$line" "$out/services.after"; then
        echo "test: a service the tests did not start was stopped or restarted during the run:" >&2
        echo "test:   before: $line" >&2
        echo "test:   after:  $(grep "^${line%%:*}:" "$out/services.after")" >&2
        bad=1
      fi
    done <"$out/services.before"
  fi
  if [ -n "$rabbit_before" ]; then
    after=$(rabbit_state)
    if [ "$after" != "$rabbit_before" ]; then
      echo "test: the shared RabbitMQ changed during the run (stopped, reconfigured or alarmed):" >&2
      echo "test:   before: $rabbit_before" >&2
      echo "test:   after:  ${after:-no answer}" >&2
      bad=1
    elif rabbit_alarmed "$after"; then
      echo "test: the shared RabbitMQ has an alarm set: $after" >&2
      bad=1
    fi
  fi
  if [ -n "${tree_check:-}" ]; then
    after=$(git --no-optional-locks status --porcelain --ignored --untracked-files=all)
    if [ "$after" != "$tree_before" ]; then
      echo "test: the tests changed the work tree (git status --porcelain --ignored, before and after):" >&2
      diff <(echo "$tree_before") <(echo "$after") | sed 's/^/test:   /' >&2
      bad=1
    fi
  fi
  [ $bad = 0 ] && echo "test: the shared services ran throughout, unchanged and without alarms; the work tree is as it was"
  return $bad
}

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

check_services || failed+=("the services' and the work tree's check")
go run scripts/testreport.go -modules "$out/packages.txt" -n 15 "$out"/*.json
echo "test: wall time: modules $((mid - start)) s, chaos $((end - mid)) s, in all $((end - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "test: failed in ${failed[*]}" >&2
  exit 1
fi
echo "test: every module passed"

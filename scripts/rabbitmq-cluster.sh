#!/usr/bin/env bash
# A three-node RabbitMQ cluster of the tests' own, for the tests that kill
# its nodes under ferry (ferryamqptest.RabbitMQCluster, which other test
# code, the chaos suite's say, can use too): never the shared server
# (port 5672) or the node that tests stop and alarm (5673), which
# scripts/services.sh starts; that script calls this one's start.
#
#   scripts/rabbitmq-cluster.sh start         start the nodes that do not answer,
#                                             and cluster them (idempotent)
#   scripts/rabbitmq-cluster.sh start-node N  start node N (1-3) again, after kill-node:
#                                             its data is kept, so it rejoins
#   scripts/rabbitmq-cluster.sh kill-node N   SIGKILL node N's Erlang VM and wait until
#                                             its AMQP port is closed
#   scripts/rabbitmq-cluster.sh pause-node N  SIGSTOP node N's Erlang VM: it holds its
#                                             connections and answers nothing
#   scripts/rabbitmq-cluster.sh resume-node N SIGCONT it
#   scripts/rabbitmq-cluster.sh status        each node, and the cluster's running nodes;
#                                             exits 0 only when all 3 run, clustered
#
# Debian's rabbitmq-server, three nodes on this machine: ferry-cN@localhost
# (N = 1, 2, 3), AMQP on 127.0.0.1:568N, Erlang distribution on 2568N, the
# management plugin on every node at 127.0.0.1:1568N: each node's API
# answers for the whole cluster, so a client that lists the three (the
# tests, ferry doctor --management-url) reads on while one node is down.
# Measured, the plugin costs about 10 MB a node (each node takes about
# 135 MB), and the three idle nodes take about 3% of one core together.
# guest/guest, from loopback only (the default). Data, logs,
# configuration, enabled-plugins file and pid file per node under
# FERRY_RABBITMQ_CLUSTER_DIR (default /var/lib/ferry-rabbitmq-cluster)/cN.
# Run as root, the nodes run as the rabbitmq user (Debian's), as
# scripts/services.sh runs the tests' own node; they share the machine's
# Erlang cookie and epmd. The schedulers do not busy-wait (+sbwt none
# +sbwtdcpu none +sbwtdio none, RabbitMQ 3.10's default too, set here so
# that it stays so): busy-waiting nodes would spin a 2-core machine.
# Killing and starting nodes needs root or the rabbitmq user.
#
# Nodes 2 and 3 join node 1 the first time they run (rabbitmqctl stop_app,
# join_cluster, start_app); a node started again keeps its data, so it is
# a member again. Each node sets cluster_partition_handling =
# pause_minority: a node cut off from the two others pauses rather than
# accepting publishes the majority never sees. Nothing else is configured:
# clients declare quorum queues themselves (x-queue-type quorum), whose
# members are the three nodes. To start over, stop the nodes
# (rabbitmqctl -n ferry-cN@localhost stop) and remove the directory.
set -u

dir=${FERRY_RABBITMQ_CLUSTER_DIR:-/var/lib/ferry-rabbitmq-cluster}
server=/usr/lib/rabbitmq/bin/rabbitmq-server
seed=ferry-c1@localhost

name_of() { echo "ferry-c$1@localhost"; }
amqp_port() { echo $((5680 + $1)); }
dist_port() { echo $((25680 + $1)); }
mgmt_port() { echo $((15680 + $1)); }

say() { echo "rabbitmq-cluster: $*"; }
err() { echo "rabbitmq-cluster: $*" >&2; }

up() { # port
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

wait_port() { # port seconds up|down
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    if up "$1"; then [ "$3" = up ] && return 0; else [ "$3" = down ] && return 0; fi
    sleep 0.1
  done
  return 1
}

ctl() { # node args...: rabbitmqctl -n node, bounded
  local n=$1
  shift
  timeout 120 rabbitmqctl -q -n "$n" "$@"
}

# pid_of prints the pid of node N's Erlang VM when it runs (its pid file,
# checked to be a beam process), or nothing.
pid_of() {
  local f=$dir/c$1/rabbitmq.pid pid
  [ -r "$f" ] || return 1
  pid=$(tr -dc 0-9 <"$f")
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
  case "$(cat "/proc/$pid/comm" 2>/dev/null)" in beam*) echo "$pid" ;; *) return 1 ;; esac
}

check_n() {
  case "${1:-}" in 1 | 2 | 3) return 0 ;; esac
  err "want a node number, 1, 2 or 3, not '${1:-}'"
  exit 2
}

# launch starts node N's Erlang VM, detached, without waiting for it.
launch() {
  local n=$1 d=$dir/c$1 node
  node=$(name_of "$1")
  [ -x "$server" ] || {
    err "no RabbitMQ binaries ($server; Debian: apt-get install rabbitmq-server)"
    return 1
  }
  mkdir -p "$d/mnesia" "$d/log" || return 1
  printf '%s\n' "listeners.tcp.local = 127.0.0.1:$(amqp_port "$n")" "loopback_users.guest = true" \
    "cluster_partition_handling = pause_minority" \
    "management.tcp.ip = 127.0.0.1" "management.tcp.port = $(mgmt_port "$n")" >"$d/rabbitmq.conf"
  echo '[rabbitmq_management].' >"$d/enabled_plugins"
  local env="RABBITMQ_NODENAME=$node RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=$(amqp_port "$n") \
    RABBITMQ_DIST_PORT=$(dist_port "$n") RABBITMQ_CONFIG_FILE=$d/rabbitmq.conf RABBITMQ_MNESIA_BASE=$d/mnesia \
    RABBITMQ_LOG_BASE=$d/log RABBITMQ_ENABLED_PLUGINS_FILE=$d/enabled_plugins RABBITMQ_PID_FILE=$d/rabbitmq.pid \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS='+sbwt none +sbwtdcpu none +sbwtdio none'"
  rm -f "$d/rabbitmq.pid"
  if [ "$(id -u)" = 0 ] && id rabbitmq >/dev/null 2>&1; then
    chown -R rabbitmq:rabbitmq "$d"
    su rabbitmq -s /bin/sh -c "cd $d && env $env $server -detached" >"$d/start.log" 2>&1
  else
    sh -c "cd $d && env $env $server -detached" >"$d/start.log" 2>&1
  fi || {
    err "rabbitmq-server did not start $node: $d/start.log"
    return 1
  }
}

# wait_node waits until node N accepts AMQP connections.
wait_node() { # n seconds
  if wait_port "$(amqp_port "$1")" "$2" up; then return 0; fi
  err "$(name_of "$1") did not come up on port $(amqp_port "$1") within $2 s (logs: $dir/c$1/log)"
  return 1
}

# bring starts node N unless it answers: a node whose application is
# stopped (a killed join, rabbitmqctl stop_app) gets it started; a node
# that does not run is launched. It does not wait.
bring() {
  local n=$1 node
  node=$(name_of "$1")
  if up "$(amqp_port "$n")"; then return 0; fi
  if pid_of "$n" >/dev/null && ctl "$node" eval 'ok.' >/dev/null 2>&1; then
    say "starting the application of $node"
    ctl "$node" start_app >/dev/null 2>&1 &
    return 0
  fi
  say "starting $node"
  launch "$n"
}

# joined reports whether node N (running) is a member of seed's cluster.
# A marker file remembers it, so that a re-run asks no rabbitmqctl.
joined() {
  local n=$1 node out
  node=$(name_of "$1")
  [ "$n" = 1 ] && return 0
  [ -f "$dir/c$n/joined" ] && return 0
  out=$(ctl "$node" eval "lists:member('$seed', rabbit_mnesia:cluster_nodes(all)).") || return 1
  if [ "$out" = true ]; then
    touch "$dir/c$n/joined"
    return 0
  fi
  return 1
}

join() {
  local n=$1 node
  node=$(name_of "$1")
  say "$node joins $seed"
  ctl "$node" stop_app >/dev/null &&
    ctl "$node" join_cluster "$seed" >/dev/null &&
    ctl "$node" start_app >/dev/null &&
    wait_node "$n" 60 &&
    touch "$dir/c$n/joined" || {
    err "$node did not join $seed"
    return 1
  }
}

line() { # n
  say "RabbitMQ cluster node $(name_of "$1") is up on port $(amqp_port "$1") (management $(mgmt_port "$1"))"
}

cmd_start() {
  local n rc=0 b
  b=$(date +%s)
  command -v rabbitmqctl >/dev/null 2>&1 || {
    err "rabbitmqctl is missing (Debian: apt-get install rabbitmq-server)"
    return 1
  }
  # All at once: a node that was clustered waits at boot for the others
  # (its Mnesia tables), which it finds only if they start too.
  local started=
  for n in 1 2 3; do
    if ! up "$(amqp_port "$n")"; then
      bring "$n" || rc=1
      started="$started $n"
    fi
  done
  for n in 1 2 3; do
    wait_node "$n" 120 || rc=1
  done
  wait # the start_apps bring left running
  for n in 2 3; do
    if up "$(amqp_port "$n")" && up "$(amqp_port 1)" && ! joined "$n"; then
      join "$n" || rc=1
    fi
  done
  for n in 1 2 3; do
    if up "$(amqp_port "$n")"; then line "$n"; else rc=1; fi
  done
  [ -n "$started" ] && [ $rc = 0 ] && say "started node(s)$started in $(($(date +%s) - b)) s"
  return $rc
}

cmd_start_node() {
  check_n "${1:-}"
  local n=$1
  if up "$(amqp_port "$n")"; then
    line "$n"
    return 0
  fi
  bring "$n" || return 1
  wait_node "$n" 120 || return 1
  wait
  line "$n"
}

cmd_kill_node() {
  check_n "${1:-}"
  local n=$1 node pid
  node=$(name_of "$1")
  if ! pid=$(pid_of "$n"); then
    if up "$(amqp_port "$n")"; then
      err "$node answers on port $(amqp_port "$n") but its pid file ($dir/c$n/rabbitmq.pid) names no running beam process"
      return 1
    fi
    say "$node is not running"
    return 0
  fi
  kill -KILL "$pid" || return 1
  local i
  for ((i = 0; i < 300; i++)); do
    if ! kill -0 "$pid" 2>/dev/null && ! up "$(amqp_port "$n")"; then
      say "killed $node (pid $pid); port $(amqp_port "$n") is closed"
      return 0
    fi
    sleep 0.1
  done
  err "$node (pid $pid) still runs or its port $(amqp_port "$n") still answers 30 s after SIGKILL"
  return 1
}

cmd_signal_node() { # STOP|CONT n
  check_n "${2:-}"
  local n=$2 pid
  if ! pid=$(pid_of "$n"); then
    err "$(name_of "$n") is not running"
    return 1
  fi
  kill "-$1" "$pid" || return 1
  say "SIG$1 $(name_of "$n") (pid $pid)"
}

cmd_status() {
  local n rc=0 pid any=
  for n in 1 2 3; do
    if up "$(amqp_port "$n")"; then
      say "$(name_of "$n"): up on port $(amqp_port "$n") (pid $(pid_of "$n" || echo '?'))"
      [ -z "$any" ] && any=$n
    else
      say "$(name_of "$n"): down (port $(amqp_port "$n") closed)"
      rc=1
    fi
  done
  if [ -n "$any" ]; then
    local running
    running=$(ctl "$(name_of "$any")" eval \
      "lists:usort([atom_to_list(N) || N <- rabbit_mnesia:cluster_nodes(running)])." 2>/dev/null | tr -d '\n ')
    say "running cluster members, as $(name_of "$any") sees them: ${running:-unknown}"
    for n in 1 2 3; do
      [[ "$running" == *"\"ferry-c$n@localhost\""* ]] || rc=1
    done
  fi
  return $rc
}

case "${1:-}" in
start) cmd_start ;;
start-node) cmd_start_node "${2:-}" ;;
kill-node) cmd_kill_node "${2:-}" ;;
pause-node) cmd_signal_node STOP "${2:-}" ;;
resume-node) cmd_signal_node CONT "${2:-}" ;;
status) cmd_status ;;
*)
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
  ;;
esac

#!/usr/bin/env bash
# Starts, if they are not already up, the services ferry's tests use:
# PostgreSQL, MariaDB, RabbitMQ (with its management plugin), NATS with
# JetStream and Redis on loopback; and servers of the tests' own beside
# them: a RabbitMQ node that tests stop and alarm (port 5673), a MariaDB
# with a ROW binlog (3307), a PostgreSQL with wal_level=logical (5433) and
# a three-node RabbitMQ cluster whose nodes tests kill (5681-5683,
# scripts/rabbitmq-cluster.sh); installs Chromium for the console's
# browser tests if it is missing.
# Idempotent: a service that answers is left alone. Debian's packages are
# assumed installed (see docs/testing.md), except promtool and buildah,
# which CI uses to check the alert rules and to build the image: run as
# root, the script installs Debian's prometheus and buildah packages when
# they are missing.
set -u

up() { # host port
  (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

wait_up() { # name port seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    if up 127.0.0.1 "$2"; then return 0; fi
    sleep 0.1
  done
  echo "services: $1 did not come up on port $2 within $3 s" >&2
  return 1
}

start() { # name port seconds command...
  local name=$1 port=$2 secs=$3
  shift 3
  if up 127.0.0.1 "$port"; then
    echo "services: $name is up on port $port"
    return 0
  fi
  echo "services: starting $name"
  "$@" >/dev/null 2>&1 || true
  wait_up "$name" "$port" "$secs" && echo "services: $name is up on port $port"
}

rc=0
# The console's browser tests drive Debian's Chromium, headless.
if [ ! -x /usr/bin/chromium ]; then
  echo "services: installing chromium (the console's browser tests)"
  { apt-get update && apt-get install -y chromium; } >/dev/null 2>&1 || { echo "services: chromium did not install" >&2; rc=1; }
fi
start PostgreSQL 5432 30 pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql 2>/dev/null | head -n1)" main start || rc=1
start MariaDB 3306 30 start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || rc=1
start Redis 6379 10 redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
  --dir /var/lib/redis --logfile /var/log/redis/ci.log || rc=1
start NATS 4222 15 start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
  -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log || rc=1
start RabbitMQ 5672 90 rabbitmq-server -detached || rc=1
# The chaos suite creates a virtual host per run through the management
# API (port 15672); without it, through rabbitmqctl, seconds slower a run.
if up 127.0.0.1 5672 && ! up 127.0.0.1 15672 && command -v rabbitmq-plugins >/dev/null 2>&1; then
  echo "services: enabling RabbitMQ's management plugin"
  if rabbitmq-plugins enable rabbitmq_management >/dev/null 2>&1; then
    wait_up "RabbitMQ management API" 15672 30 || true
  else
    echo "services: RabbitMQ's management plugin did not start; the chaos suite uses rabbitmqctl" >&2
  fi
fi
# The CloudEvents tests (integration/cloudevents) speak AMQP 1.0, as the
# CloudEvents Go SDK does, which RabbitMQ 3.x serves on its AMQP port
# through the rabbitmq_amqp1_0 plugin: enabled on the running server, never
# restarted for it, when it is not enabled already.
if up 127.0.0.1 5672 && command -v rabbitmq-plugins >/dev/null 2>&1; then
  if rabbitmq-plugins list -q -e -m '^rabbitmq_amqp1_0$' 2>/dev/null | grep -qx rabbitmq_amqp1_0; then
    echo "services: RabbitMQ's AMQP 1.0 plugin is enabled"
  elif rabbitmq-plugins enable rabbitmq_amqp1_0 >/dev/null 2>&1; then
    echo "services: enabled RabbitMQ's AMQP 1.0 plugin"
  else
    echo "services: RabbitMQ's AMQP 1.0 plugin did not start; the CloudEvents tests on RabbitMQ skip" >&2
    rc=1
  fi
fi

# A RabbitMQ node of the tests' own, for the tests that stop RabbitMQ's
# application or set a memory alarm on it (ferryamqptest.DisruptRabbitMQ):
# never the shared server above, which other tests and other people use.
# Debian's rabbitmq-server, as a second node: its own name
# (ferry-disrupt@localhost), AMQP port 5673 on loopback, distribution port
# 25673, no management plugin (the tests use rabbitmqctl -n), its data,
# logs, configuration and enabled-plugins file under FERRY_RABBITMQ_DIR
# (default /var/lib/ferry-rabbitmq). guest/guest, from loopback only (the
# default). It shares the machine's Erlang cookie and epmd with the
# shared node. It runs in its data directory, never in the
# checkout that started it: an Erlang node whose working directory was
# removed fails rabbitmqctl's stop_app (it reads its plugins' paths
# relative to it). Created on first use, started when not up (about 130 MB;
# 10-30 s to start), never stopped by this script.
rabbitdir=${FERRY_RABBITMQ_DIR:-/var/lib/ferry-rabbitmq}
rabbit_node=ferry-disrupt@localhost
rabbitmq_own() {
  local d=$rabbitdir
  mkdir -p "$d/mnesia" "$d/log" || return 1
  printf '%s\n' "listeners.tcp.local = 127.0.0.1:5673" "loopback_users.guest = true" >"$d/rabbitmq.conf"
  echo '[].' >"$d/enabled_plugins"
  local env="RABBITMQ_NODENAME=$rabbit_node RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=5673 \
    RABBITMQ_DIST_PORT=25673 RABBITMQ_CONFIG_FILE=$d/rabbitmq.conf RABBITMQ_MNESIA_BASE=$d/mnesia \
    RABBITMQ_LOG_BASE=$d/log RABBITMQ_ENABLED_PLUGINS_FILE=$d/enabled_plugins RABBITMQ_PID_FILE=$d/rabbitmq.pid"
  local server=/usr/lib/rabbitmq/bin/rabbitmq-server
  [ -x "$server" ] || { echo "services: no RabbitMQ binaries ($server; Debian: apt-get install rabbitmq-server)" >&2; return 1; }
  if [ "$(id -u)" = 0 ] && id rabbitmq >/dev/null 2>&1; then
    chown -R rabbitmq:rabbitmq "$d"
    su rabbitmq -s /bin/sh -c "cd $d && env $env $server -detached" >"$d/start.log" 2>&1
  else
    sh -c "cd $d && env $env $server -detached" >"$d/start.log" 2>&1
  fi || { echo "services: rabbitmq-server did not start: $d/start.log" >&2; return 1; }
  wait_up "RabbitMQ (the tests' own node)" 5673 90
}
if up 127.0.0.1 5673; then echo "services: RabbitMQ (the tests' own node) is up on port 5673"; else
  # A node whose application a killed test left stopped answers
  # rabbitmqctl, not AMQP: its application is started again.
  if command -v rabbitmqctl >/dev/null 2>&1 && rabbitmqctl -q -n "$rabbit_node" eval 'ok.' >/dev/null 2>&1; then
    echo "services: starting the application of RabbitMQ node $rabbit_node"
    if rabbitmqctl -q -n "$rabbit_node" start_app >/dev/null 2>&1 && wait_up "RabbitMQ (the tests' own node)" 5673 60; then
      echo "services: RabbitMQ (the tests' own node) is up on port 5673"
    else
      rc=1
    fi
  else
    echo "services: starting RabbitMQ (the tests' own node, $rabbit_node)"
    b=$(date +%s)
    rabbitmq_own && echo "services: RabbitMQ (the tests' own node) is up on port 5673 after $(($(date +%s) - b)) s" || rc=1
  fi
fi

# The log relay's tests need servers that keep a change log, which the ones
# above do not: a MariaDB with its binlog in ROW format (full row images) on
# port 3307 and a PostgreSQL with wal_level=logical on port 5433, each with
# a data directory of its own under FERRY_LOGDB_DIR. Created on first use,
# started when not up, never stopped by this script.
logdir=${FERRY_LOGDB_DIR:-/var/lib/ferry-logdb}
mariadb_binlog() {
  local d=$logdir/mariadb
  if [ ! -d "$d/data/mysql" ]; then
    mkdir -p "$d/data" "$d/log" && chown -R mysql:mysql "$d" 2>/dev/null
    mariadb-install-db --user=mysql --datadir="$d/data" --auth-root-authentication-method=normal \
      --skip-test-db >"$d/install.log" 2>&1 || { echo "services: mariadb-install-db failed: $d/install.log" >&2; return 1; }
  fi
  start-stop-daemon --start --oknodo --background --chuid mysql --pidfile "$d/daemon.pid" --make-pidfile \
    --exec /usr/sbin/mariadbd -- \
    --no-defaults --datadir="$d/data" --port=3307 --bind-address=127.0.0.1 --socket="$d/mysqld.sock" \
    --pid-file="$d/mysqld.pid" --log-error="$d/error.log" --server-id=3307 --log-bin="$d/log/binlog" \
    --binlog-format=ROW --binlog-row-image=FULL --max-connections=300 --innodb-buffer-pool-size=256M
  wait_up "MariaDB (binlog)" 3307 30 || return 1
  mariadb -h127.0.0.1 -P3307 -uroot -e "CREATE DATABASE IF NOT EXISTS test" 2>/dev/null || true
}
postgres_logical() {
  local d=$logdir/pg bin
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
  [ -n "$bin" ] || { echo "services: no PostgreSQL binaries" >&2; return 1; }
  if [ ! -f "$d/data/PG_VERSION" ]; then
    mkdir -p "$d" && chown postgres:postgres "$d"
    su postgres -c "$bin/initdb -D $d/data -A trust -U postgres" >"$d/../pg-initdb.log" 2>&1 ||
      { echo "services: initdb failed" >&2; return 1; }
  fi
  su postgres -c "$bin/pg_ctl -D $d/data -l $d/server.log -w start -o \"-p 5433 -c listen_addresses=127.0.0.1 \
    -c unix_socket_directories=$d -c wal_level=logical -c max_replication_slots=40 -c max_wal_senders=40 \
    -c max_connections=300 -c fsync=on\"" >/dev/null 2>&1
  wait_up "PostgreSQL (logical)" 5433 30 || return 1
  psql -h127.0.0.1 -p5433 -Upostgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1 ||
    psql -h127.0.0.1 -p5433 -Upostgres -c "CREATE DATABASE test" >/dev/null
}
if up 127.0.0.1 3307; then echo "services: MariaDB (binlog) is up on port 3307"; else
  echo "services: starting MariaDB (binlog)"
  mkdir -p "$logdir"
  mariadb_binlog && echo "services: MariaDB (binlog) is up on port 3307" || rc=1
fi
if up 127.0.0.1 5433; then echo "services: PostgreSQL (logical) is up on port 5433"; else
  echo "services: starting PostgreSQL (logical)"
  mkdir -p "$logdir"
  postgres_logical && echo "services: PostgreSQL (logical) is up on port 5433" || rc=1
fi

# A three-node RabbitMQ cluster of the tests' own (ferry-c1..3@localhost,
# AMQP ports 5681-5683, management API on 15681-15683), whose nodes the
# cluster tests kill and restart (ferryamqptest.RabbitMQCluster):
# scripts/rabbitmq-cluster.sh starts the nodes that do not answer and
# clusters them the first time (about 130 MB a node; a minute on the first
# start, 20-30 s to start the three again, instant when they run).
cluster_script=$(dirname "$0")/rabbitmq-cluster.sh
if [ -f "$cluster_script" ]; then
  bash "$cluster_script" start || rc=1
else
  echo "services: $cluster_script is missing" >&2
  rc=1
fi

# promtool checks deploy/prometheus (.ci/run). Only the tool is wanted: the
# package may start and enable a Prometheus server, which is stopped again.
if command -v promtool >/dev/null 2>&1; then
  echo "services: promtool is installed"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "services: installing promtool (Debian package prometheus)"
  if apt-get update -qq >/dev/null &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; then
    if command -v systemctl >/dev/null 2>&1; then
      systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
    service prometheus stop >/dev/null 2>&1 || true
    echo "services: promtool is installed"
  else
    echo "services: could not install the prometheus package (promtool)" >&2
    rc=1
  fi
else
  echo "services: promtool is missing (Debian: apt-get install prometheus); go test ./deploy/ checks the rules without it"
fi

# buildah builds the Dockerfile without a container engine or a registry
# (scripts/image.sh, which CI runs).
if command -v buildah >/dev/null 2>&1; then
  echo "services: buildah is installed"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "services: installing buildah (Debian package buildah)"
  if apt-get update -qq >/dev/null &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah >/dev/null; then
    echo "services: buildah is installed"
  else
    echo "services: could not install the buildah package" >&2
    rc=1
  fi
else
  echo "services: buildah is missing (Debian: apt-get install buildah); scripts/image.sh needs it"
fi
exit $rc

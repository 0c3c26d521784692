#!/usr/bin/env bash
# Starts, if they are not already up, the services ferry's tests use:
# PostgreSQL, MariaDB, RabbitMQ (with its management plugin), NATS with
# JetStream and Redis on loopback;
# installs Chromium for the console's browser tests if it is missing.
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

#!/usr/bin/env bash
# Starts the local services the tests use, when they are not already running. Idempotent.
set -uo pipefail

up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  local port=$1 name=$2
  for _ in $(seq 1 60); do up "$port" && return 0; sleep 1; done
  echo "services: $name did not come up on port $port" >&2
  return 1
}

if ! up 5432; then
  echo "services: starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
  wait_port 5432 PostgreSQL
fi
if ! up 4222; then
  echo "services: starting NATS (JetStream)"
  mkdir -p /var/lib/nats-server
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
  wait_port 4222 NATS
fi
if ! up 6379; then
  echo "services: starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_port 6379 Redis
fi
if ! up 5672; then
  echo "services: starting RabbitMQ"
  rabbitmq-server -detached
  wait_port 5672 RabbitMQ
fi
if ! up 1883; then
  echo "services: starting Mosquitto"
  mosquitto -d -c /etc/mosquitto/mosquitto.conf
  wait_port 1883 Mosquitto
fi
# Logical replication (the CDC relay, and pg-transactional-outbox in the benchmarks) needs
# wal_level=logical, and room for the slots of the CDC tests that run side by side (slots are
# server-wide); it takes a restart, done once per server.
if [ "$(psql -h 127.0.0.1 -U postgres -d postgres -tAc 'SHOW wal_level')" != "logical" ] ||
  [ "$(psql -h 127.0.0.1 -U postgres -d postgres -tAc 'SHOW max_replication_slots')" -lt 32 ]; then
  echo "services: setting wal_level=logical, max_replication_slots=32 and restarting PostgreSQL"
  psql -h 127.0.0.1 -U postgres -d postgres -c 'ALTER SYSTEM SET wal_level = logical' >/dev/null
  psql -h 127.0.0.1 -U postgres -d postgres -c 'ALTER SYSTEM SET max_replication_slots = 32' >/dev/null
  psql -h 127.0.0.1 -U postgres -d postgres -c 'ALTER SYSTEM SET max_wal_senders = 32' >/dev/null
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main restart ||
    echo "services: could not restart PostgreSQL; logical replication stays unavailable" >&2
  wait_port 5432 PostgreSQL
fi
# promtool (Debian's prometheus package) checks the alert rules and the dashboard's queries in the tests.
# The package's postinst would start a Prometheus server on :9090: a policy-rc.d that forbids it is
# put in place for the install when none is there, and a server it started anyway is stopped.
if ! command -v promtool >/dev/null 2>&1; then
  echo "services: installing promtool (Debian's prometheus package)"
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends prometheus >/dev/null ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends prometheus >/dev/null; } ||
    echo "services: could not install prometheus; the promtool tests will fail" >&2
  [ "$own_policy" = 1 ] && rm -f "$policy"
  if up 9090; then
    echo "services: stopping the Prometheus server the package started"
    service prometheus stop >/dev/null 2>&1 ||
      start-stop-daemon --stop --oknodo --exec /usr/bin/prometheus >/dev/null 2>&1 || true
  fi
  command -v systemctl >/dev/null 2>&1 && systemctl disable prometheus >/dev/null 2>&1 || true
fi
# The test database must exist.
psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 ||
  psql -h 127.0.0.1 -U postgres -d postgres -c 'CREATE DATABASE test'
exit 0

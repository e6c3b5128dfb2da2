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
# wal_level=logical; it takes a restart, done once per server.
if [ "$(psql -h 127.0.0.1 -U postgres -d postgres -tAc 'SHOW wal_level')" != "logical" ]; then
  echo "services: setting wal_level=logical and restarting PostgreSQL"
  psql -h 127.0.0.1 -U postgres -d postgres -c 'ALTER SYSTEM SET wal_level = logical' >/dev/null
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main restart ||
    echo "services: could not restart PostgreSQL; logical replication stays unavailable" >&2
  wait_port 5432 PostgreSQL
fi
# The test database must exist.
psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 ||
  psql -h 127.0.0.1 -U postgres -d postgres -c 'CREATE DATABASE test'
exit 0

-- tx-outbox schema, version 8: a backlog that costs O(partitions) to read (src/ops/backlog-sql.ts).
-- {{schema}} is replaced by the validated, quoted schema name.

-- Dead events, counted exactly through this partial index. Producers' inserts (status
-- pending) skip it, and a relay's retry update leaves status alone, so it stays HOT; only
-- the rare transition to dead (and a replay back) writes an entry.
CREATE INDEX IF NOT EXISTS events_dead ON {{schema}}.events (id) WHERE status = 'dead';

-- The relay-side published backlog: one row, written by the relays every few seconds
-- (src/relay/backlog-task.ts), read by `enqueue` for its maxPending backpressure at most once
-- a second per process (src/producer/backpressure.ts). `interval_ms` is the writer's cadence:
-- a measurement older than three of them means no relay is running.
CREATE TABLE IF NOT EXISTS {{schema}}.backlog (
  singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  pending      bigint NOT NULL,
  dead         bigint NOT NULL,
  interval_ms  integer NOT NULL,
  measured_at  timestamptz NOT NULL
) WITH (fillfactor = 50);

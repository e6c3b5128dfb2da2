-- tx-outbox inbox, version 2: idempotent consumers.

-- One row per (consumer, event) applied: the dedup record, committed with the business effect.
CREATE TABLE IF NOT EXISTS {{schema}}.inbox (
  consumer        text NOT NULL,
  event_id        uuid NOT NULL,
  aggregate_type  text NOT NULL,
  aggregate_id    text NOT NULL,
  sequence        bigint NOT NULL,
  outcome         text NOT NULL CHECK (outcome IN ('processed', 'stale')),
  processed_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, event_id)
);
-- BRIN: processed_at grows with insertion order; pruning reads ranges, producers pay almost nothing.
CREATE INDEX IF NOT EXISTS inbox_processed_at ON {{schema}}.inbox USING brin (processed_at);

-- Per consumer and aggregate, the last sequence applied (ordering policies). Its row lock
-- serialises the handling of one aggregate across consumer instances.
CREATE TABLE IF NOT EXISTS {{schema}}.inbox_positions (
  consumer        text NOT NULL,
  aggregate_type  text NOT NULL,
  aggregate_id    text NOT NULL,
  last_sequence   bigint NOT NULL,
  PRIMARY KEY (consumer, aggregate_type, aggregate_id)
) WITH (fillfactor = 50);

-- Failed or deferred deliveries so far, per consumer and event (cleared when applied).
CREATE TABLE IF NOT EXISTS {{schema}}.inbox_attempts (
  consumer        text NOT NULL,
  event_id        uuid NOT NULL,
  attempts        integer NOT NULL,
  first_at        timestamptz NOT NULL DEFAULT now(),
  last_at         timestamptz NOT NULL DEFAULT now(),
  last_reason     text NOT NULL,
  PRIMARY KEY (consumer, event_id)
);

-- Parked messages: never dropped silently, never retried in a hot loop. Kept whole, so a
-- release can hand them to the consumer again.
CREATE TABLE IF NOT EXISTS {{schema}}.inbox_quarantine (
  id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  consumer        text NOT NULL,
  event_id        uuid NOT NULL,
  aggregate_type  text NOT NULL,
  aggregate_id    text NOT NULL,
  sequence        bigint NOT NULL,
  event_type      text NOT NULL,
  schema_version  integer NOT NULL,
  headers         jsonb NOT NULL,
  payload         bytea NOT NULL,
  reason          text NOT NULL,
  attempts        integer NOT NULL DEFAULT 0,
  quarantined_at  timestamptz NOT NULL DEFAULT now(),
  released_at     timestamptz,
  release_reason  text,
  UNIQUE (consumer, event_id)
);

-- tx-outbox schema, version 1.
-- {{schema}} is replaced by the validated, quoted schema name; {{partitions}} by the partition count.

CREATE TABLE IF NOT EXISTS {{schema}}.config (
  singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  partitions  integer NOT NULL CHECK (partitions BETWEEN 1 AND 1024),
  created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO {{schema}}.config (partitions) VALUES ({{partitions}}) ON CONFLICT DO NOTHING;

-- The hot table: only events that are not yet delivered live here.
CREATE TABLE IF NOT EXISTS {{schema}}.events (
  id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id         uuid NOT NULL,
  partition        smallint NOT NULL,
  aggregate_type   text NOT NULL,
  aggregate_id     text NOT NULL,
  sequence         bigint NOT NULL,
  event_type       text NOT NULL,
  schema_version   integer NOT NULL DEFAULT 1,
  topic            text,
  payload          jsonb,
  payload_bytes    bytea,
  headers          jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at       timestamptz NOT NULL DEFAULT now(),
  deliver_after    timestamptz,
  next_attempt_at  timestamptz NOT NULL DEFAULT now(),
  attempts         integer NOT NULL DEFAULT 0,
  last_error       text,
  status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'dead')),
  dead_at          timestamptz,
  CONSTRAINT events_payload_one CHECK ((payload IS NULL) <> (payload_bytes IS NULL))
) WITH (fillfactor = 90);

-- No index beyond the primary key: the claim walks it in id order (see
-- src/relay/claim-sql.ts), and every extra index costs every producer's insert.

-- Producers' side: one row per aggregate, the last sequence handed out. Its row
-- lock orders concurrent writers of one aggregate. Room for HOT updates.
CREATE TABLE IF NOT EXISTS {{schema}}.aggregate_sequences (
  aggregate_type  text NOT NULL,
  aggregate_id    text NOT NULL,
  last_sequence   bigint NOT NULL,
  PRIMARY KEY (aggregate_type, aggregate_id)
) WITH (fillfactor = 50);

-- Relay's side (written only by the partition's owner, never by producers): the
-- last sequence delivered, and until when the aggregate's head is blocked (its
-- next retry; 'infinity' while it is dead). The claim's ordering gate reads it.
CREATE TABLE IF NOT EXISTS {{schema}}.aggregate_progress (
  aggregate_type      text NOT NULL,
  aggregate_id        text NOT NULL,
  delivered_sequence  bigint NOT NULL DEFAULT 0,
  blocked_until       timestamptz,
  PRIMARY KEY (aggregate_type, aggregate_id)
) WITH (fillfactor = 50);

-- Partition leases: the epoch is the fencing token, raised on every change of owner.
-- `sleeping` is set by an idle owner that LISTENs: only then do producers NOTIFY,
-- so a busy relay costs producers no NOTIFY (whose commit-time lock serialises commits).
CREATE TABLE IF NOT EXISTS {{schema}}.partitions (
  partition    smallint PRIMARY KEY,
  owner        text,
  epoch        bigint NOT NULL DEFAULT 0,
  lease_until  timestamptz NOT NULL DEFAULT '-infinity',
  sleeping     boolean NOT NULL DEFAULT false
) WITH (fillfactor = 50);
INSERT INTO {{schema}}.partitions (partition)
  SELECT p FROM generate_series(0, {{partitions}} - 1) AS p
  ON CONFLICT DO NOTHING;

-- Live relay instances and their heartbeats.
CREATE TABLE IF NOT EXISTS {{schema}}.relays (
  relay_id      text PRIMARY KEY,
  host          text NOT NULL,
  pid           integer NOT NULL,
  lease_ms      integer NOT NULL,
  started_at    timestamptz NOT NULL DEFAULT now(),
  heartbeat_at  timestamptz NOT NULL DEFAULT now()
);

-- Audit trail of operator actions (dead-event replays and the like).
CREATE TABLE IF NOT EXISTS {{schema}}.audit (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at          timestamptz NOT NULL DEFAULT now(),
  actor       text NOT NULL,
  action      text NOT NULL,
  event_ids   uuid[] NOT NULL DEFAULT '{}',
  reason      text NOT NULL
);

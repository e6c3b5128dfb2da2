-- tx-outbox schema, version 11: the CDC relay's slot progress (docs/schema.md, cdc_state).
-- {{schema}} is replaced by the validated, quoted schema name.
-- The slot and the publication themselves are not created here: they need wal_level = logical
-- and the REPLICATION attribute, which a plain migrate must not require (`tx-outbox migrate --cdc`).

-- One row per replication slot, written by the streaming relay every backlogIntervalMs: what it
-- confirmed and how far behind the oldest event it has not settled is. `tx-outbox status` and
-- `cdc status` read it (lag in seconds is only known to the relay: the slot knows bytes).
CREATE TABLE IF NOT EXISTS {{schema}}.cdc_state (
  slot_name      text PRIMARY KEY,
  relay_id       text,
  confirmed_lsn  pg_lsn,
  lag_seconds    double precision,
  measured_at    timestamptz
);

-- What kind of relay a row of `relays` is: 'poll' (the polling relays, which share the partitions
-- fairly) or 'cdc' (a CDC relay: all partitions or none). A polling relay's fair share counts only
-- 'poll' rows, so a CDC relay standing by next to polling relays takes no partition from them.
ALTER TABLE {{schema}}.relays ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'poll';

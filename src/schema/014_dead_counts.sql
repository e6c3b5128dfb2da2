-- tx-outbox schema, version 14: a backlog read whose cost does not grow with the dead events
-- (src/ops/backlog-sql.ts). {{schema}} is replaced by the validated, quoted schema name.

-- Pending events in id order. The backlog's head sample reads the first of them through this
-- index instead of walking the primary key past every dead row ahead of them (500,000 dead
-- events at the head: 43,800 buffers and 240 ms a scrape; now 304 buffers and 4 ms). A partial
-- index on the dead rows cannot give that walk: it finds dead rows, not the pending rows
-- between them. The price is one more entry per producer insert, at the right edge of a bigint
-- index (measured: 67 bytes of WAL per event, 760 → 827 for a one-event enqueue; with the WHEN
-- clauses below, about 1 µs of database CPU per row of a bulk insert, within the noise of a
-- whole enqueue transaction). A retry's update leaves status alone and stays HOT; the rare
-- transition to dead leaves the index. Building it makes writes to events wait while it is
-- built (0.3 s for 600,000 rows).
CREATE INDEX IF NOT EXISTS events_pending ON {{schema}}.events (id) WHERE status = 'pending';

-- Dead events per partition, kept by the triggers below on every change of an event's status,
-- whoever makes it (the relay's outcome and sequence-fault statements, a CDC hand-over, `dead
-- replay` and `dead skip`, plain SQL): the backlog reads the exact dead count here, O(partitions),
-- instead of counting the events_dead index (O(dead events)). A producer's insert is pending: it
-- evaluates the WHEN clauses and fires nothing; so does a relay's delete of a delivered event.
CREATE TABLE IF NOT EXISTS {{schema}}.dead_counts (
  partition  smallint PRIMARY KEY,
  dead       bigint NOT NULL
);

-- A change of an event's deadness (inserted dead, marked dead, replayed, skipped, deleted dead)
-- adds ±1 for its partition to a tally in a transaction-local setting, and the commit writes the
-- tally once per partition (in partition order: two commits never deadlock on the counts).
-- Writing the counts row by row would update one row many times in one transaction, each update
-- walking the versions before it: a replay of 40,000 dead events took 3 s, and the time grows
-- with the square. The commit-time write is a deferred constraint trigger on the same rows, so
-- a statement that changes no event's deadness (a producer's insert, a relay's delivery or
-- retry) fires nothing at all: it only evaluates the WHEN clauses.
-- The functions run with the caller's rights (a SET clause on them would undo the tally at their
-- exit): the roles that change events (relay, operator) may write dead_counts. They name
-- pg_catalog's functions and operators, so a session's search_path cannot swap them.
CREATE OR REPLACE FUNCTION {{schema}}.tally_dead_events() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  tally jsonb := coalesce(nullif(pg_catalog.current_setting('tx_outbox.dead_tally', true), ''), '{}')::jsonb;
BEGIN
  IF TG_OP <> 'INSERT' AND OLD.status = 'dead' THEN -- deleted, replayed, skipped, or moved
    tally := pg_catalog.jsonb_set(tally, ARRAY[OLD.partition::text],
      pg_catalog.to_jsonb(coalesce((tally OPERATOR(pg_catalog.->>) OLD.partition::text)::bigint, 0) - 1));
  END IF;
  IF TG_OP <> 'DELETE' AND NEW.status = 'dead' THEN
    tally := pg_catalog.jsonb_set(tally, ARRAY[NEW.partition::text],
      pg_catalog.to_jsonb(coalesce((tally OPERATOR(pg_catalog.->>) NEW.partition::text)::bigint, 0) + 1));
  END IF;
  PERFORM pg_catalog.set_config('tx_outbox.dead_tally', tally::text, true);
  RETURN NULL;
END
$fn$;

-- At commit, once per changed row: the first call writes the whole tally, the others find it empty.
CREATE OR REPLACE FUNCTION {{schema}}.write_dead_tally() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  tally text := pg_catalog.current_setting('tx_outbox.dead_tally', true);
BEGIN
  IF tally IS NULL OR tally = '' OR tally = '{}' THEN
    RETURN NULL;
  END IF;
  PERFORM pg_catalog.set_config('tx_outbox.dead_tally', '', true);
  INSERT INTO {{schema}}.dead_counts AS c (partition, dead)
  SELECT t.key::smallint, t.value::bigint FROM pg_catalog.jsonb_each_text(tally::jsonb) AS t
  ORDER BY 1
  ON CONFLICT (partition) DO UPDATE SET dead = c.dead + excluded.dead;
  RETURN NULL;
END
$fn$;

-- TRUNCATE: no dead event left, and nothing of this transaction's tally either.
CREATE OR REPLACE FUNCTION {{schema}}.reset_dead_counts() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM pg_catalog.set_config('tx_outbox.dead_tally', '', true);
  DELETE FROM {{schema}}.dead_counts;
  RETURN NULL;
END
$fn$;

DROP TRIGGER IF EXISTS dead_inserted ON {{schema}}.events;
CREATE TRIGGER dead_inserted AFTER INSERT ON {{schema}}.events
  FOR EACH ROW WHEN (NEW.status = 'dead') EXECUTE FUNCTION {{schema}}.tally_dead_events();
DROP TRIGGER IF EXISTS dead_changed ON {{schema}}.events;
CREATE TRIGGER dead_changed AFTER UPDATE OF status, partition ON {{schema}}.events
  FOR EACH ROW WHEN ((OLD.status = 'dead' OR NEW.status = 'dead')
                     AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.partition IS DISTINCT FROM NEW.partition))
  EXECUTE FUNCTION {{schema}}.tally_dead_events();
DROP TRIGGER IF EXISTS dead_deleted ON {{schema}}.events;
CREATE TRIGGER dead_deleted AFTER DELETE ON {{schema}}.events
  FOR EACH ROW WHEN (OLD.status = 'dead') EXECUTE FUNCTION {{schema}}.tally_dead_events();

DROP TRIGGER IF EXISTS dead_inserted_written ON {{schema}}.events;
CREATE CONSTRAINT TRIGGER dead_inserted_written AFTER INSERT ON {{schema}}.events
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW WHEN (NEW.status = 'dead') EXECUTE FUNCTION {{schema}}.write_dead_tally();
DROP TRIGGER IF EXISTS dead_changed_written ON {{schema}}.events;
CREATE CONSTRAINT TRIGGER dead_changed_written AFTER UPDATE OF status, partition ON {{schema}}.events
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW WHEN ((OLD.status = 'dead' OR NEW.status = 'dead')
                     AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.partition IS DISTINCT FROM NEW.partition))
  EXECUTE FUNCTION {{schema}}.write_dead_tally();
DROP TRIGGER IF EXISTS dead_deleted_written ON {{schema}}.events;
CREATE CONSTRAINT TRIGGER dead_deleted_written AFTER DELETE ON {{schema}}.events
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW WHEN (OLD.status = 'dead') EXECUTE FUNCTION {{schema}}.write_dead_tally();

DROP TRIGGER IF EXISTS dead_truncated ON {{schema}}.events;
CREATE TRIGGER dead_truncated AFTER TRUNCATE ON {{schema}}.events
  FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.reset_dead_counts();

-- The count as it stands. Creating the triggers locked events against writes until this
-- migration commits, so no change slips between this count and the triggers.
INSERT INTO {{schema}}.dead_counts AS c (partition, dead)
SELECT e.partition, count(*) FROM {{schema}}.events e WHERE e.status = 'dead' GROUP BY e.partition
ON CONFLICT (partition) DO UPDATE SET dead = excluded.dead;

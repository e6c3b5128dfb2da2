-- tx-outbox delivery history, version 5: who published what, when (off unless the relay is asked).

-- One row per delivered event, written by the relay's outcome statement when history is on
-- (src/relay/outcome-sql.ts). RANGE-partitioned by day (UTC) on published_at: retention drops
-- whole partitions (no DELETE, no bloat). The relay creates the daily partitions ahead of time
-- and drops them behind (src/ops/history.ts) through the functions below; the DEFAULT
-- partition catches a row whose day has no partition yet, so the outcome never fails for it.
CREATE TABLE IF NOT EXISTS {{schema}}.deliveries (
  event_id        uuid NOT NULL,
  partition       smallint NOT NULL,
  aggregate_type  text NOT NULL,
  aggregate_id    text NOT NULL,
  sequence        bigint NOT NULL,
  event_type      text NOT NULL,
  topic           text,
  created_at      timestamptz NOT NULL,
  published_at    timestamptz NOT NULL,
  attempts        integer NOT NULL,
  relay_id        text NOT NULL,
  publisher       text NOT NULL,
  payload         jsonb,
  payload_bytes   bytea
) PARTITION BY RANGE (published_at);

-- The one index: "where is event X?" (one small index per partition).
CREATE INDEX IF NOT EXISTS deliveries_event_id ON {{schema}}.deliveries (event_id);

CREATE TABLE IF NOT EXISTS {{schema}}.deliveries_default PARTITION OF {{schema}}.deliveries DEFAULT;

-- Partition maintenance, as SECURITY DEFINER functions owned by the migrator (the table's
-- owner): only an owner may create or drop partitions, and these let a least-privilege relay
-- do exactly that and nothing more. Each call is one short transaction of the caller's, which
-- sets lock_timeout; an advisory lock serialises concurrent maintainers.

-- What maintenance should do now: create the partitions of today (UTC) and `ahead` days after
-- it, and of any day the DEFAULT partition holds rows for (they move into it); drop the
-- partitions of days before today - `retention_days`; purge the DEFAULT rows that old.
CREATE OR REPLACE FUNCTION {{schema}}.history_plan(ahead integer, retention_days integer)
RETURNS TABLE (action text, day date)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  WITH today AS (SELECT (now() AT TIME ZONE 'UTC')::date AS d),
  existing AS (
    SELECT to_date(substr(c.relname, 13), 'YYYYMMDD') AS day
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = '{{schema}}.deliveries'::regclass AND c.relname ~ '^deliveries_p[0-9]{8}$'
  ),
  stray AS (
    SELECT DISTINCT (published_at AT TIME ZONE 'UTC')::date AS day FROM {{schema}}.deliveries_default
  ),
  wanted AS (
    SELECT (t.d + n)::date AS day FROM today t, generate_series(0, ahead) AS n
    UNION
    SELECT s.day FROM stray s, today t WHERE s.day >= t.d - retention_days
  )
  SELECT 'create', w.day FROM wanted w WHERE w.day NOT IN (SELECT e.day FROM existing e)
  UNION ALL
  SELECT 'drop', e.day FROM existing e, today t WHERE e.day < t.d - retention_days
  UNION ALL
  SELECT 'purge', t.d - retention_days FROM today t
  WHERE EXISTS (SELECT 1 FROM stray s WHERE s.day < t.d - retention_days)
  ORDER BY 1, 2
$fn$;

-- Creates the partition of `day` without blocking the relay's inserts: built as a table of its
-- own with a CHECK matching the range (ATTACH then skips scanning it), rows of that day moved
-- out of DEFAULT (locked first, so none lands there meanwhile), then attached. ATTACH takes
-- SHARE UPDATE EXCLUSIVE on the parent (inserts go on) and ACCESS EXCLUSIVE on DEFAULT (normally
-- empty). Returns the rows moved from DEFAULT, or -1 when the partition already exists.
CREATE OR REPLACE FUNCTION {{schema}}.history_add_partition(day date)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  name text := 'deliveries_p' || to_char(day, 'YYYYMMDD');
  lo timestamptz := day::timestamp AT TIME ZONE 'UTC';
  hi timestamptz := (day + 1)::timestamp AT TIME ZONE 'UTC';
  moved bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('tx-outbox:history:' || '{{schema}}', 0));
  IF to_regclass('{{schema}}.' || name) IS NOT NULL THEN
    RETURN -1;
  END IF;
  EXECUTE format('CREATE TABLE {{schema}}.%I (LIKE {{schema}}.deliveries INCLUDING DEFAULTS)', name);
  EXECUTE format('ALTER TABLE {{schema}}.%I ADD CONSTRAINT %I CHECK (published_at >= %L AND published_at < %L)',
                 name, name || '_range', lo, hi);
  LOCK TABLE {{schema}}.deliveries_default IN ACCESS EXCLUSIVE MODE;
  EXECUTE format('WITH moved AS (DELETE FROM {{schema}}.deliveries_default WHERE published_at >= %L AND published_at < %L RETURNING *) '
                 'INSERT INTO {{schema}}.%I SELECT * FROM moved', lo, hi, name);
  GET DIAGNOSTICS moved = ROW_COUNT;
  EXECUTE format('ALTER TABLE {{schema}}.deliveries ATTACH PARTITION {{schema}}.%I FOR VALUES FROM (%L) TO (%L)',
                 name, lo, hi);
  RETURN moved;
END
$fn$;

-- Drops the partition of `day` (only a partition of deliveries, only a day before today -
-- `retention_days`). DROP takes ACCESS EXCLUSIVE on the parent for a moment: the caller's
-- lock_timeout keeps it from queueing behind, and blocking, the relay's outcome statements.
CREATE OR REPLACE FUNCTION {{schema}}.history_drop_partition(day date, retention_days integer)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  name text := 'deliveries_p' || to_char(day, 'YYYYMMDD');
BEGIN
  IF retention_days IS NULL OR retention_days < 1 THEN
    RAISE EXCEPTION 'retention_days must be at least 1, not %', retention_days USING ERRCODE = '22023';
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended('tx-outbox:history:' || '{{schema}}', 0));
  IF day >= (now() AT TIME ZONE 'UTC')::date - retention_days THEN
    RETURN false;
  END IF;
  IF NOT EXISTS (
    SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = '{{schema}}.deliveries'::regclass AND c.relname = name
  ) THEN
    RETURN false;
  END IF;
  EXECUTE format('DROP TABLE {{schema}}.%I', name);
  RETURN true;
END
$fn$;

-- Deletes DEFAULT rows of days before today - `retention_days` (only strays: rows that landed
-- while their day had no partition). Returns the rows deleted.
CREATE OR REPLACE FUNCTION {{schema}}.history_purge_default(retention_days integer)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  purged bigint;
BEGIN
  IF retention_days IS NULL OR retention_days < 1 THEN
    RAISE EXCEPTION 'retention_days must be at least 1, not %', retention_days USING ERRCODE = '22023';
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended('tx-outbox:history:' || '{{schema}}', 0));
  DELETE FROM {{schema}}.deliveries_default
  WHERE published_at < ((now() AT TIME ZONE 'UTC')::date - retention_days)::timestamp AT TIME ZONE 'UTC';
  GET DIAGNOSTICS purged = ROW_COUNT;
  RETURN purged;
END
$fn$;

-- Functions are executable by PUBLIC by default: only the owner, and the roles granted (the
-- relay's, the operator's: src/schema/roles.ts), may maintain the history.
REVOKE EXECUTE ON FUNCTION {{schema}}.history_plan(integer, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{schema}}.history_add_partition(date) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{schema}}.history_drop_partition(date, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{schema}}.history_purge_default(integer) FROM PUBLIC;

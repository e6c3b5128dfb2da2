-- tx-outbox schema, version 9: a cheaper producer (docs/performance.md, W3).
-- {{schema}} is replaced by the validated, quoted schema name.

-- The partition of an aggregate key. The schema's partition count never changes after it is
-- created, so it is written into the function as a constant: an IMMUTABLE SQL function the planner
-- inlines, where the statement used to read config for every event. Every function and operator is
-- pg_catalog's, named so: a session whose search_path puts another schema first cannot swap them
-- (and scatter an aggregate over partitions). A SET search_path clause would stop the inlining.
DO $migration$
DECLARE n integer;
BEGIN
  SELECT partitions INTO STRICT n FROM {{schema}}.config;
  EXECUTE format(
    $f$CREATE OR REPLACE FUNCTION {{schema}}.partition_of(aggregate_type text, aggregate_id text)
       RETURNS smallint LANGUAGE sql IMMUTABLE PARALLEL SAFE
       AS 'SELECT ((pg_catalog.hashtextextended(pg_catalog.textcat(pg_catalog.textcat($1, pg_catalog.chr(31)), $2), 0::bigint)
                   OPERATOR(pg_catalog.&) 9223372036854775807) OPERATOR(pg_catalog.%%) %s::bigint)::smallint'$f$,
    n);
END
$migration$;

-- One event with its aggregate's next gap-free sequence (src/producer/enqueue-sql.ts calls it).
-- A function rather than one statement because its parts run only when needed: an aggregate
-- that has a sequence row takes one UPDATE (whose row lock orders concurrent writers of the
-- aggregate); only a new (or pruned) one is inserted, starting at the sequence floor read after
-- that UPDATE waited on (and did not find) a row the pruner held — the floor is a SEQUENCE, whose
-- value no snapshot hides (006_bounded.sql). The single-statement form paid for the insert's
-- setup on every event. `wake`: the LISTEN channel to notify when the owner of the event's
-- partition sleeps (NULL: never). Returns the sequence. SECURITY INVOKER: the caller's own grants;
-- its own search_path, so what it calls unqualified (now(), +, pg_notify) is pg_catalog's whatever
-- the caller's search_path.
CREATE OR REPLACE FUNCTION {{schema}}.enqueue_one(
  event_id uuid, aggregate_type text, aggregate_id text, event_type text, schema_version integer,
  topic text, payload jsonb, payload_bytes bytea, headers jsonb, deliver_after timestamptz, wake text)
RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_partition smallint := {{schema}}.partition_of(enqueue_one.aggregate_type, enqueue_one.aggregate_id);
  v_sequence bigint;
  v_base bigint;
BEGIN
  UPDATE {{schema}}.aggregate_sequences s SET last_sequence = s.last_sequence + 1, written_at = now()
  WHERE s.aggregate_type = enqueue_one.aggregate_type AND s.aggregate_id = enqueue_one.aggregate_id
  RETURNING s.last_sequence, s.sequence_base INTO v_sequence, v_base;
  IF NOT FOUND THEN
    INSERT INTO {{schema}}.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence, sequence_base)
    SELECT enqueue_one.aggregate_type, enqueue_one.aggregate_id, f.last_value + 1, f.last_value
    FROM {{schema}}.sequence_floor f
    ON CONFLICT ON CONSTRAINT aggregate_sequences_pkey
      DO UPDATE SET last_sequence = s.last_sequence + 1, written_at = now()
    RETURNING s.last_sequence, s.sequence_base INTO v_sequence, v_base;
  END IF;
  INSERT INTO {{schema}}.events (event_id, partition, aggregate_type, aggregate_id, sequence, sequence_base,
    event_type, schema_version, topic, payload, payload_bytes, headers, deliver_after, next_attempt_at)
  VALUES (enqueue_one.event_id, v_partition, enqueue_one.aggregate_type, enqueue_one.aggregate_id,
    v_sequence, v_base, enqueue_one.event_type, enqueue_one.schema_version, enqueue_one.topic,
    enqueue_one.payload, enqueue_one.payload_bytes, enqueue_one.headers, enqueue_one.deliver_after,
    greatest(now(), coalesce(enqueue_one.deliver_after, now())));
  IF wake IS NOT NULL
     AND EXISTS (SELECT 1 FROM {{schema}}.partitions t WHERE t.partition = v_partition AND t.sleeping) THEN
    PERFORM pg_notify(wake, '');
  END IF;
  RETURN v_sequence;
END
$fn$;
